"""``GET /v1/models``: the model served and the adapters a request may name (clients ask on start-up)."""

from __future__ import annotations

from fastapi import APIRouter, Request

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request) -> dict:
    """OpenAI's model list (clients ask for it on start-up): the model served, then each
    adapter a request may name in its ``model`` field."""
    served = request.app.state.service.served
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "setllm"} for name in served]}
