"""`ui_router`: the UI's pages (/ui), its browser login (/ui/login: ui/login.py) and read API (/v1) over one lake,
as one router, for the two servers that carry it: `lake ui` (ui/app.py) and `lake serve` (ingest/app.py takes it
among its extra routers, so the UI sits behind that server's own guards: its Host check, token and HTTP limits)."""
from __future__ import annotations

import functools
import secrets
from pathlib import Path

from fastapi import APIRouter

from ui.api import api_router
from ui.config import QUERY_MEMORY_MB, QUERY_TIMEOUT_S
from ui.export_index import ExportIndex
from ui.exports import csrf_token, exports_router
from ui.login import login_router
from ui.pages import pages_router
from ui.reader import LakeReader


def ui_router(lake_root: str | Path, query_timeout: float = QUERY_TIMEOUT_S, query_memory_mb: float = QUERY_MEMORY_MB,
              runs_root: str | Path | None = None, exports: str | Path | None = None,
              screenshots: str | Path | None = None) -> APIRouter:
    """The pages and the read API over the lake at `lake_root` (opened at the first request), each query within
    `query_timeout` seconds and `query_memory_mb` MiB; `runs_root`: the folder of run folders whose per-step logs a run page may read (None:
    the lake's records only; ui/runfiles.py); `exports`: the folder the views page's export button writes into
    (None: no button, the route a 404; ui/exports.py), whose exports a conversation page links when they hold its
    trajectory (ui/export_index.py); `screenshots`: the folder a web episode's screenshot is served from (None: its
    path shown as text; ui/screenshots.py)."""
    reader = LakeReader(lake_root, query_timeout, query_memory_mb)
    secret = secrets.token_bytes(32)
    csrf = functools.partial(csrf_token, secret) if exports is not None else None
    router = APIRouter()
    router.include_router(api_router(reader))
    index = ExportIndex(exports)
    router.include_router(pages_router(reader, runs_root, csrf, screenshots, index))
    router.include_router(exports_router(reader, Path(exports) if exports is not None else None, secret))
    router.include_router(login_router())
    return router
