"""The HTTP edges of `lake serve-model`: its state on the app, the guards and body reading shared with `lake serve`
(edge/guards.py: the Host check against DNS rebinding, the bearer token, same-origin and JSON content type on POSTs,
the size-limited body), and the error answers in OpenAI's shape.

The guards read what edge/guards.py's `ServerState` says (the Host names, and the tokens and body limits of the
options, edge/options.py ServerOptions); ServingState is one, as `lake serve`'s IngestState is, so both servers
apply one rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Depends, Request
from starlette.exceptions import HTTPException
from fastapi.responses import JSONResponse

from edge.errors import BadInput
from edge.guards import admit, json_content_type, parse_json, read_body, same_origin
from lake import Lake

from .config import ServeModelConfig
from .engine import EmbeddedEngine
from .follow import Follower
from .protocol import ApiError
from .record import Conversations, RecordFailed, Recorder
from .versions import GenerationFailed, UnknownModel, VersionGone


@dataclass
class ServingState:
    """Everything a request needs, on `app.state.serving`."""

    config: ServeModelConfig
    engine: EmbeddedEngine
    recorder: Recorder
    lake: Lake | None
    follower: Follower | None = None
    host_names: frozenset[str] | None = None
    conversations: Conversations = field(default_factory=Conversations)
    requests: int = 0
    rejected: int = 0
    failed: int = 0
    unknown_routes: int = 0  # requests for a route this server does not have (clients probing): a 404, no rejection


async def get_serving(request: Request) -> ServingState:
    return request.app.state.serving


async def guard(request: Request, st: ServingState = Depends(get_serving)) -> None:
    """Every route but /v1/health: the Host check, then the bearer token (before the body is read)."""
    await admit(request, st)


async def json_request(request: Request, st: ServingState = Depends(get_serving)):
    """A POST's JSON body: from this origin, declared JSON, within --max-body-mb, parsed (a 400 otherwise)."""
    await same_origin(request)
    await json_content_type(request)
    return parse_json(await read_body(request, st))


def error(status: int, message: str, *, param: str | None = None, code: str | None = None,
          kind: str = "invalid_request_error", headers: dict | None = None) -> JSONResponse:
    return JSONResponse(ApiError(status, message, param=param, code=code, kind=kind).body(), status_code=status,
                        headers=headers)


def install_error_handlers(app) -> None:
    """Every failure answered once, in OpenAI's error shape, the server up."""

    def count(request: Request, refused: bool) -> None:
        st: ServingState = request.app.state.serving
        if refused:
            st.rejected += 1
        else:
            st.failed += 1

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        count(request, exc.status < 500)
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(BadInput)
    async def bad_input(request: Request, exc: BadInput):
        count(request, True)
        status = 400 if exc.status == 422 else exc.status
        return error(status, exc.describe(), param=exc.field_str(), code=exc.kind)

    @app.exception_handler(UnknownModel)
    async def unknown_model(request: Request, exc: UnknownModel):
        count(request, True)
        return error(404, str(exc), param="model", code="model_not_found")

    @app.exception_handler(VersionGone)
    async def version_gone(request: Request, exc: VersionGone):
        count(request, False)
        return error(503, str(exc), param="model", code="version_unloaded", kind="server_error")

    @app.exception_handler(GenerationFailed)
    async def generation_failed(request: Request, exc: GenerationFailed):
        count(request, False)
        return error(500, str(exc), kind="server_error")

    @app.exception_handler(RecordFailed)
    async def record_failed(request: Request, exc: RecordFailed):
        count(request, False)  # --record sync: the answer is not sent without its record
        return error(exc.status, str(exc), kind="server_error", code="record_failed")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 404 and "endpoint" not in request.scope:  # no route matched: nothing was refused
            request.app.state.serving.unknown_routes += 1
        else:
            count(request, True)
        kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}.get(
            exc.status_code, "invalid_request_error")
        return error(exc.status_code, str(exc.detail), kind=kind, headers=exc.headers)
