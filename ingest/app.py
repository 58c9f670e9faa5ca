"""`lake serve`: the durable trajectory API (native /v1 routes + the 13 Atropos run-api routes).

A 2xx means committed: every write goes through a per-table batcher (`ingest.batcher`) that turns all
requests pending at that moment into one lake submit and answers each only after that commit. Retries are
safe: trajectory ids (client-given, content-derived, or from an `Idempotency-Key`) are checked against an
index loaded from the lake at start. The Atropos queue is durable: its events are `runs` rows and its groups
`trajectories` rows, replayed at start (`ingest.atropos_queue`). The lake's automatic compaction runs beside
the server (`--compact-interval`) and stops with it.

This module assembles the app: the lifespan that loads the state, the error answers (registered once, for
every route) and the request counters. The routes live in `routes_atropos` and `routes_native`.
"""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Sequence

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from edge.errors import BadInput
from edge.guards import host_names
from edge.limits import uvicorn_config
from edge.listen import bind_socket
from ingest import routes_atropos, routes_native
from ingest.batcher import CommitFailed
from ingest.config import ServeConfig
from ingest.http import ValidationDetail, bad_input_response, guard
from ingest.state import IngestState
from lake import CompactThresholds, Lake


def create_app(lake_root: str | Path, config: ServeConfig | None = None,
               routers: Sequence[APIRouter] = ()) -> FastAPI:
    """The app; `routers`: more routes to serve (the read-only UI: lachesis passes it in, ingest may not import
    it), included after ours, behind the same app-wide guard (Host check, token) and HTTP limits."""
    config = config or ServeConfig()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        lake = Lake.init(lake_root, fsync=config.fsync)  # `lake serve` may create the lake it is pointed at
        app.state.ingest = await asyncio.to_thread(IngestState.load, lake, config)
        app.state.ingest.host_names = host_names(config.host, config.allowed_hosts)
        # a server commits a small file per group commit: merged in the background, so a lake fed for a day
        # does not end with thousands of them (lake.autocompact; never blocks a commit)
        compactor = (lake.autocompactor(CompactThresholds(interval_s=config.compact_interval)).start()
                     if config.compact_interval > 0 else None)
        try:
            yield
        finally:
            if compactor is not None:  # waits for a pass in progress; re-raises the error that ended one
                await asyncio.to_thread(compactor.stop)

    # with a token, the schema pages go too: every route but /v1/health asks for it, and these take no dependency
    docs = {"openapi_url": None, "docs_url": None, "redoc_url": None} if config.token else {}
    app = FastAPI(title="Lachesis ingest (Atropos-compatible)", lifespan=lifespan,
                  dependencies=[Depends(guard)], **docs)
    app.include_router(routes_atropos.router)
    app.include_router(routes_native.router)
    for router in routers:
        app.include_router(router)

    @app.exception_handler(BadInput)
    async def bad_input(request: Request, exc: BadInput):
        request.app.state.ingest.counters.rejected += 1
        return bad_input_response(exc)

    @app.exception_handler(ValidationDetail)
    async def validation_detail(request: Request, exc: ValidationDetail):
        request.app.state.ingest.counters.rejected += 1
        return JSONResponse({"detail": exc.detail}, status_code=422)

    @app.exception_handler(CommitFailed)
    async def commit_failed(request: Request, exc: CommitFailed):
        return JSONResponse({"detail": f"lake commit failed, retry: {exc}"}, status_code=exc.status)

    @app.middleware("http")
    async def count(request: Request, call_next):
        st: IngestState = request.app.state.ingest
        st.counters.requests += 1
        t0 = time.perf_counter()
        resp = await call_next(request)
        if request.method == "POST":
            st.latencies.append(time.perf_counter() - t0)
        return resp

    return app


def serve(lake_root: str | Path, config: ServeConfig, routers: Sequence[APIRouter] = ()) -> None:
    sock = bind_socket(config.host, config.port, config.bind_retry_s)  # bound before the lake loads: no gap
    app = create_app(lake_root, config, routers)
    uv = uvicorn_config(app, config.limits, log_level=config.log_level, access_log=False,
                        timeout_graceful_shutdown=5)
    uvicorn.Server(uv).run(sockets=[sock])
