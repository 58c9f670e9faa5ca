"""The views page's export button: `POST /ui/views/{view}/export` runs the same export as `lake export VIEW
--as-of PIN` (views.export.export_view with views/export_config.py's ExportConfig, parquet) into a new folder of
the folder `lake ui --exports` names, and shows its manifest. The UI's only write, and not into the lake: the
export folder is outside it (views.export refuses a folder inside the lake) and new for every export.

Off unless `--exports` is given (and never on `lake serve`, which carries the UI without it): the route is then a
404 and the page shows no button. When on, it is guarded thrice, because a browser sends the login cookie with it
(edge.guards.is_export: the one POST the cookie opens, and only under /ui/views/.../export):
* the CSRF token: the form carries `csrf_token(secret, cookie)`, an HMAC of the login cookie's value (the empty
  string on a server without a token) under a secret this process drew at start; a POST without the token of the
  same cookie is refused (403) before anything is read of the lake. Another site can neither read the page that
  holds the token (same-origin policy) nor compute it;
* edge.guards.same_origin: a POST whose Origin or Sec-Fetch-Site says another site is refused (403);
* the cookie itself is SameSite=Strict: a browser does not send it on another site's form.
One export at a time (a second while one runs is a 429); the form is an urlencoded body of at most FORM_MAX_BYTES.

`GET /ui/exports/{name}` shows one export of that folder (its manifest, read without following a link), the page a
conversation links for each export whose rows hold its trajectory (ui/export_index.py).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from edge.errors import BadInput
from edge.guards import TOKEN_COOKIE, read_limited, same_origin
from ground.files import Refusal
from ui.export_index import read_manifest
from ui.pages import error_page, page, raw_as_of, short
from ui.params import ParamError, as_of as parse_pin
from ui.reader import LakeReader

FORM_MAX_BYTES = 8 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"


def csrf_token(secret: bytes, request: Request) -> str:
    """The export form's token for the browser that sent `request`: an HMAC of its login cookie's value."""
    cookie = request.cookies.get(TOKEN_COOKIE, "")
    return hmac.new(secret, b"export\0" + cookie.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def export_folder(exports: Path, view: str) -> Path:
    """A new folder for one export of `view`: <exports>/<view>-<UTC time>-<random>; the view's name kept to safe
    characters (it is one of views/*.sql's names, but a folder name is no place to trust one)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in view)[:60] or "view"
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return exports / f"{safe}-{stamp}-{uuid.uuid4().hex[:6]}"


def exports_router(reader: LakeReader, exports: Path | None, secret: bytes | None = None) -> APIRouter:
    """The export route over `reader`'s lake into `exports` (None: off, a 404)."""
    secret = secret or secrets.token_bytes(32)
    busy = threading.Lock()
    router = APIRouter(prefix="/ui", include_in_schema=False)

    @router.post("/views/{view}/export")
    async def export(view: str, request: Request) -> Response:
        await same_origin(request)
        if exports is None:
            return error_page(404, "exports are off on this server (lake ui --exports FOLDER turns them on)")
        ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != FORM_TYPE:
            return error_page(415, f"send the export form ({FORM_TYPE})")
        try:
            body = await read_limited(request, FORM_MAX_BYTES)
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=4)
        except BadInput as exc:
            return error_page(exc.status, f"the form was not taken: {exc.describe()}")
        except (UnicodeDecodeError, ValueError):
            return error_page(400, "the form was not taken: not the export form")
        token = (fields.get("csrf") or [""])[0]
        if len(fields.get("csrf") or []) != 1 or not hmac.compare_digest(token, csrf_token(secret, request)):
            return error_page(403, "the export form's token is missing or is not this page's (reload the view's "
                                   "page and press export again)")
        pins = fields.get("as_of") or []
        try:
            pin = parse_pin(pins[0]) if len(pins) == 1 and pins[0].strip() else None
        except ValueError as exc:
            return error_page(400, str(ParamError("as_of", str(exc))))
        if not busy.acquire(blocking=False):
            return error_page(429, "an export is running: try again when it is done")
        try:  # the export reads and writes for a while: a worker thread's, not the event loop's
            return await run_in_threadpool(run_export, reader, view, pin, exports, request)
        finally:
            busy.release()

    @router.get("/exports/{name}")
    def shown(name: str, request: Request) -> Response:
        """One export of the exports folder (what a conversation page links): its manifest, as after the button."""
        if exports is None:
            return error_page(404, "exports are off on this server (lake ui --exports FOLDER turns them on)")
        try:
            manifest = read_manifest(exports, name)
        except (Refusal, OSError, ValueError) as exc:
            return error_page(404, f"no export {short(name)!r} in the exports folder: "
                                   f"{short(getattr(exc, 'reason', None) or exc)}")
        if not isinstance(manifest.get("row_count"), int) or not isinstance(manifest.get("lake_versions"), dict):
            return error_page(404, f"{short(name)!r} holds no manifest of `lake export`")
        view = str(manifest.get("view") or "")
        shown = {"format": "", "event_ids_sha256": "", "view_sql_sha256": "", "splits": None,
                 **manifest, "view": view}
        return page("exported.jinja", request=request, title=f"Export {short(name)}", as_of=None,
                    versions=manifest["lake_versions"], view=view, output=str(exports / name), manifest=shown)

    return router


def run_export(reader: LakeReader, view: str, pin: Any, exports: Path, request: Request) -> Response:
    """`lake export VIEW --as-of PIN --output <new folder>` (parquet), the same code; its manifest as a page."""
    from lake.errors import LakeError
    from views import list_views
    from views.export import ExportError, export_view
    from views.export_config import ExportConfig, ExportInputError

    if view not in list_views(reader.lake.views_dir):
        return error_page(404, f"no view {view[:200]!r} in views/*.sql")
    try:
        versions = reader.resolve(pin)
    except ParamError as exc:
        return error_page(400, str(exc))
    out = export_folder(exports, view)
    try:
        exports.mkdir(parents=True, exist_ok=True)
        cfg = ExportConfig(view=view, output=out, as_of=None, allow_empty=True)
        manifest = export_view(reader.lake, cfg.view, cfg.output, format=cfg.format,
                               **{**cfg.export_arguments(), "as_of": versions})
    except (ExportError, ExportInputError, LakeError, OSError) as exc:
        return error_page(400, f"the export failed: {short(str(exc))}", raw_as_of(request))
    return page("exported.jinja", request=request, title=f"Exported {short(view)}",
                as_of=None, versions=versions, view=view, output=str(out), manifest=manifest)
