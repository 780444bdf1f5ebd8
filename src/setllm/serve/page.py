"""The playground at ``/``: one self-contained page (HTML, CSS and script in one file, no
CDN, no build step) that asks the server's own routes. A person types a question and its
options (or documents and a question, or an instruction and candidates for the judge),
picks a reading and an adapter, and sees the answer with every option's score; *Every
ordering* sends every ordering of the options through the chosen reading and through the
base model and draws how often each option wins under each.

The page is package data (``static/playground.html``), so an installed package serves it.
It holds nothing of the model and is open without the API key (:mod:`.auth`); it asks for
the key when ``/health`` says the server needs one. Its Content-Security-Policy lets it talk
to this server only.
"""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()
PAGE = "static/playground.html"
HEADERS = {
    "Cache-Control": "no-cache",
    # Inline script and style only, requests to this server only: nothing is loaded from elsewhere.
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                               "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


@functools.cache
def page_html() -> str:
    return resources.files(__package__).joinpath(PAGE).read_text(encoding="utf-8")


@router.get("/", include_in_schema=False)
async def playground() -> HTMLResponse:
    """The playground page."""
    return HTMLResponse(page_html(), headers=HEADERS)
