"""`lake serve-model`: the trained policy behind an OpenAI-compatible API (chat completions with tools and
streaming, completions, models), every call recorded in the lake, new increments of a streaming trainer swapped in
as they are written.

`create_app(config)` assembles it: the lifespan that loads the model (the engine), opens the lake (created if
missing, as `lake serve` does), starts the recorder and the follower, the routers and the error answers.
`serve(config)` binds (127.0.0.1 by default) and runs uvicorn. The model is loaded before the port is bound, so a
bad --model or --adapter is a one-line error at start and a client never meets a server that is not ready.
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI

from edge.guards import host_names
from edge.limits import uvicorn_config
from edge.listen import bind_socket
from lake import CompactThresholds, Lake, LakeError, resolve_root

from . import routes_chat, routes_models
from .access_log import AccessLog, log
from .config import ServeModelConfig
from .engine import EmbeddedEngine
from .errors import ServingError
from .follow import Follower
from .http import ServingState, install_error_handlers
from .record import Recorder
from .vllm_engine import VLLMEngine


def load_engine(config: ServeModelConfig) -> tuple[EmbeddedEngine, Follower | None]:
    """The engine with its first version loaded (a ServingError, or the trainers' TrainerInputError, one line, for a
    bad model, adapter or followed folder), and the follower of --follow (not started)."""
    engine = VLLMEngine(config) if config.engine == "vllm" else EmbeddedEngine(config)
    log(f"loading {engine.model_path}" + (f" + {config.adapter}" if config.adapter else "")
          + (f", following {config.follow}" if config.follow else "")
          + (f", {engine.threads} torch threads" if isinstance(engine, EmbeddedEngine) else ""))
    follower = None
    if config.follow:
        follower = Follower(engine, config.follow, poll_interval=config.poll_interval,
                            promote_if_better=config.promote_if_better, lake_root=config.lake_root)
        engine.load_initial(config.adapter, follower.newest())
    else:
        engine.load_initial(config.adapter, None)
    return engine, follower


def create_app(config: ServeModelConfig, engine: EmbeddedEngine | None = None,
               follower: Follower | None = None) -> FastAPI:
    """The app; `engine` (and its `follower`) as load_engine returns them, else loaded in the lifespan."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        eng, fol = (engine, follower) if engine is not None else await asyncio.to_thread(load_engine, config)
        lake = None
        if config.record != "off":
            lake = await asyncio.to_thread(Lake.init, resolve_root(config.lake_root))
        recorder = Recorder(lake, config.record, config.record_queue)
        # one small file per group commit: merged in the background, as `lake serve` does (never blocks a commit)
        compactor = (lake.autocompactor(CompactThresholds(interval_s=config.compact_interval)).start()
                     if lake is not None and config.compact_interval > 0 else None)
        app.state.serving = ServingState(config, eng, recorder, lake, fol, host_names(config.host, config.allowed_hosts))
        if lake is not None:  # conversations answered before a restart keep joining their trajectories
            await asyncio.to_thread(app.state.serving.conversations.load, lake)
        eng.start()
        recorder.start()
        if fol is not None:
            fol.start()
        try:
            yield
        finally:
            if fol is not None:
                await asyncio.to_thread(fol.stop)
            await recorder.close()
            await asyncio.to_thread(eng.close)
            if compactor is not None:
                await asyncio.to_thread(compactor.stop)

    docs = {"openapi_url": None, "docs_url": None, "redoc_url": None} if config.token else {}
    app = FastAPI(title="Lachesis model server (OpenAI-compatible)", lifespan=lifespan, **docs)
    app.include_router(routes_chat.router)
    app.include_router(routes_models.router)
    install_error_handlers(app)
    app.add_middleware(AccessLog, version_header=routes_chat.VERSION_HEADER, quiet=config.quiet)
    return app


def serve(config: ServeModelConfig, on_ready=None) -> None:
    """Load the model, bind, serve until SIGINT/SIGTERM. `on_ready(engine)` runs once the model is loaded."""
    if config.record != "off":  # before the model loads: a lake that cannot be reached is one line, not uvicorn's
        try:                    # startup traceback (the lake's errors never show the URL's credentials)
            Lake.init(resolve_root(config.lake_root))
        except LakeError as exc:
            raise ServingError(f"--lake: {exc}") from None
    engine, follower = load_engine(config)
    if on_ready is not None:
        on_ready(engine)
    sock = bind_socket(config.host, config.port)
    app = create_app(config, engine, follower)
    uvicorn.Server(server_config(app, config)).run(sockets=[sock])


def server_config(app: FastAPI, config: ServeModelConfig) -> uvicorn.Config:
    """uvicorn's configuration for `app`: the HTTP limits `lake serve` has (--limits; edge.limits)."""
    return uvicorn_config(app, config.limits, log_level=config.log_level, access_log=False,
                          timeout_graceful_shutdown=5)
