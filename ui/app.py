"""`lake ui`: the UI's router (ui/routes.py) alone, for a lake with no `lake serve` running.

The same edge as both servers (edge/): the Host check against DNS rebinding and the bearer token on every route but
/v1/health (edge/guards.py, as an app-wide dependency on `UiState`, which is an edge `ServerState`), the socket bound
before anything loads (edge/listen.py) and uvicorn with the HTTP limits (edge/limits.py). It opens the lake
read-only and never creates one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from edge.guards import admit, host_names
from edge.limits import uvicorn_config
from edge.listen import bind_socket
from ui.api import json_response
from ui.config import UiConfig
from ui.routes import ui_router


@dataclass
class UiState:
    """What edge's guards read of this server (edge.guards.ServerState): its options and the Host names."""

    config: UiConfig
    host_names: frozenset[str] | None


async def guard(request: Request) -> None:
    """Every route (the app's dependency): the Host check, then the bearer token."""
    state: UiState = request.app.state.ui
    await admit(request, state)


def create_app(lake_root: str | Path, config: UiConfig | None = None) -> FastAPI:
    config = config or UiConfig()
    # with a token, the schema pages go too: they take no dependency (as `lake serve` does)
    docs = {"openapi_url": None, "docs_url": None, "redoc_url": None} if config.token else {}
    app = FastAPI(title="Lachesis UI (read-only)", dependencies=[Depends(guard)], **docs)
    app.state.ui = UiState(config, host_names(config.host, config.allowed_hosts))

    @app.get("/v1/health", tags=["health"])
    def health() -> Response:
        """Liveness, without the token."""
        return json_response({"status": "ok"})

    @app.get("/", include_in_schema=False)
    def home() -> Response:
        return RedirectResponse("/ui")

    app.include_router(ui_router(lake_root, config.query_timeout, config.query_memory_mb, config.runs, config.exports, config.screenshots))
    return app


def serve(lake_root: str | Path, config: UiConfig) -> None:
    sock = bind_socket(config.host, config.port)  # a port in use is an error at start
    app = create_app(lake_root, config)
    uv = uvicorn_config(app, config.limits, log_level=config.log_level, access_log=False,
                        timeout_graceful_shutdown=5)
    uvicorn.Server(uv).run(sockets=[sock])
