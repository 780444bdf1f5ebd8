"""``create_app(lm, config)``: the FastAPI application, usable without a network (tests use
``TestClient``). Owns the error shape: every failure is ``{"error": "<one line>"}`` on setllm's
routes (a path it does not serve: a 404 listing the routes) and OpenAI's error object on the
OpenAI-compatible ones (:func:`.errors.body`), and what every answer carries: ``x-request-id``,
and a ``setllm-warning`` header per warning about the request (:mod:`.warned`)."""

from __future__ import annotations

import logging
import re
import time
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from .. import __version__
from ..errors import SetLLMError
from . import auth, guard, page, warned
from .config import ServeConfig
from .errors import (
    ApiError,
    BadRequest,
    Internal,
    ShuttingDown,
    Unprocessable,
    as_api_error,
    body,
    meant,
    printable,
)
from .routes import OPENAI_PATHS, ROUTERS
from .service import Service

ALWAYS_OPEN = ("/health", "/metrics")  # answered while draining too
API_ROUTES = tuple(r for router in ROUTERS for r in router.routes)
KNOWN_PATHS = frozenset(r.path for r in API_ROUTES)
ROUTES = ", ".join(f"{m} {r.path}" for r in (*API_ROUTES, *page.router.routes) for m in sorted(r.methods) if m != "HEAD")  # HEAD: as GET
CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")  # a client's own x-request-id, kept where it is this plain
log = logging.getLogger("setllm.serve")


def create_app(lm, config: ServeConfig | None = None, judge_lm=None, adapters=None) -> FastAPI:
    """The server for ``lm`` (a :class:`setllm.SetLLM`; ``judge_lm``: another one for
    ``/v1/judge``, None: ``lm``; ``adapters``: models by the name a request gives, e.g. the
    views of a :class:`setllm.AdapterBank`). The model thread starts and stops with the app's
    lifespan (``with TestClient(app):``, or uvicorn)."""
    service = Service(lm, config or ServeConfig(), judge_lm, adapters)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warned.HOOK.install()
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            warned.HOOK.remove()

    app = FastAPI(title="setllm serve", version=__version__, lifespan=lifespan,
                  description="An order-invariant model behind HTTP: options and set elements are read as sets.")
    app.state.service = service
    app.state.error_response = error_response  # for what wraps the app where it listens (.hosts)
    for router in (*ROUTERS, page.router):
        app.include_router(router)
    _install_error_handlers(app)
    app.middleware("http")(_track)
    app.add_middleware(guard.Guard, error=error_response)  # outermost: bodies read whole and bounded, a client's leaving cancels
    return app


async def _track(request: Request, call_next):
    """Turn requests away while draining or without the key; count the rest and
    time them (``/metrics``); a stream counts as in flight (a drain waits for it) until its
    last event is out. Every answer names the request (``x-request-id``) and carries what
    setllm warned about it (:mod:`.warned`)."""
    service: Service = request.app.state.service
    start, status, streaming = time.perf_counter(), 500, False
    service.in_flight += 1

    def done() -> None:
        service.in_flight -= 1
        service.metrics.observe_request(_endpoint(request), status, time.perf_counter() - start)

    given = request.headers.get(warned.REQUEST_ID, "")
    notes = warned.Notes(f"{request.method} {request.url.path}", *([given] if CLIENT_ID.fullmatch(given) else []))
    try:
        with warned.collecting(notes):  # the route's task runs in a copy of this context: it sees the notes
            refusal = _refusal(request, service)
            response = error_response(refusal, request.url.path) if refusal else await call_next(request)
        status = response.status_code
        for name, value in notes.headers():
            response.headers.append(name, value)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            response.body_iterator, streaming = _counted(response.body_iterator, done), True
        return response
    finally:
        if not streaming:  # a stream's end calls it
            done()


async def _counted(body: AsyncIterator[bytes], done: Callable[[], None]) -> AsyncIterator[bytes]:
    try:
        async for chunk in body:
            yield chunk
    finally:
        done()


def _endpoint(request: Request) -> str:
    """The route's path as a metrics label (any other path is "other": labels stay few)."""
    route = request.scope.get("route")
    if route is not None:
        return route.path
    return request.url.path if request.url.path in KNOWN_PATHS else "other"


def _refusal(request: Request, service: Service) -> ApiError | None:
    if service.draining and request.url.path not in ALWAYS_OPEN:
        return ShuttingDown("server is shutting down")
    denied = auth.refusal(request.url.path, request.headers.get("authorization"), service.config.api_key)
    return denied


def error_response(err: ApiError, path: str = "") -> JSONResponse:
    """The answer ``err`` is, for a request to ``path`` (an OpenAI route: OpenAI's shape)."""
    return JSONResponse(body(err, path in OPENAI_PATHS), status_code=err.status, headers=err.headers)


def validation_error(errors: list[dict], model: type[BaseModel] | None = None) -> ApiError:
    """pydantic's error list as one line: malformed JSON is a 400, a schema violation 422.
    An unknown field comes first (a typo'd name is why a required one is missing), with the
    field of ``model`` (the route's body) it most likely meant."""
    if not errors:
        return Unprocessable("invalid request body")
    errors = sorted(errors, key=lambda e: e.get("type") != "extra_forbidden")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return BadRequest(f"malformed JSON body: {first.get('ctx', {}).get('error', first.get('msg', ''))}")
    loc = [part for part in first.get("loc", ()) if part != "body"]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "body"
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = f"unknown field{_meant(loc, model)}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Unprocessable(f"{printable(path)}: {msg}{more}", param=path)


def _meant(loc: list, model: type[BaseModel] | None) -> str:
    """``; did you mean 'options'?`` for the unknown field at ``loc`` of ``model``, with the
    fields it takes; "" where the model is not known."""
    for part in loc[:-1]:
        model = _field_model(model, part)
    if model is None or not loc:
        return ""
    close = meant(loc[-1], model.model_fields)
    return (f"; did you mean {close!r}?" if close else "") + f" (this body takes: {', '.join(model.model_fields)})"


def _field_model(model: type[BaseModel] | None, part) -> type[BaseModel] | None:
    """The model that field ``part`` of ``model`` holds (inside a list or an Optional), else None."""
    if model is None or isinstance(part, int):
        return model
    field = model.model_fields.get(part)
    todo = [field.annotation] if field is not None else []
    while todo:
        kind = todo.pop()
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
        todo += typing.get_args(kind)
    return None


async def _body_problem(request: Request) -> str | None:
    try:
        (await request.body()).decode("utf-8")
    except UnicodeDecodeError as e:
        return f"request body is not UTF-8 text (byte {e.start}); send JSON as UTF-8"
    except Exception:  # noqa: BLE001 - the body cannot be read again: keep starlette's message
        return None
    return None


def _body_model(request: Request) -> type[BaseModel] | None:
    route = request.scope.get("route")
    params = getattr(getattr(route, "dependant", None), "body_params", None)
    return params[0].field_info.annotation if params else None


class _Status(ApiError):
    """starlette's own refusals (405, 404): their status, in the server's shape."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message, headers)
        self.status = status
        self.kind = "server_error" if status >= 500 else "invalid_request_error"


def _install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc, request.url.path)

    async def on_setllm_error(request: Request, exc: SetLLMError) -> JSONResponse:
        return error_response(as_api_error(exc), request.url.path)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json" and not kind.endswith("+json"):  # FastAPI then reads no JSON body at all
            return error_response(Unprocessable(f"the request body must be JSON sent with the header 'Content-Type: application/json' "
                                                f"(got {printable(repr(kind)) if kind else 'no Content-Type'})"), request.url.path)
        return error_response(validation_error(list(exc.errors()), _body_model(request)), request.url.path)

    async def on_http(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # starlette's "error parsing the body": say what is wrong with it
            problem = await _body_problem(request)
            if problem:
                return error_response(BadRequest(problem), request.url.path)
        if exc.status_code == 404 and request.scope.get("route") is None:  # no route: say which there are
            where = printable(f"{request.method} {request.url.path}")
            return error_response(_Status(404, f"no route {where} on this server; it serves: {ROUTES}"))
        return error_response(_Status(exc.status_code, str(exc.detail), getattr(exc, "headers", None)), request.url.path)

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(Internal(f"internal error ({type(exc).__name__})"), request.url.path)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(SetLLMError, on_setllm_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_bug)
