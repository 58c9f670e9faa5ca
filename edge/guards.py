"""The HTTP edge both servers put before their routes (`lake serve`: ingest/http.py, `lake serve-model`:
serving/http.py), one rule for both: the Host check against DNS rebinding, the bearer token (or, on a page read, the
browser's login cookie), same-origin and a JSON content type on POSTs, and the request body read within the limits
(declared, streamed and inflated size) and parsed as JSON, each before anything else of the request is looked at.

The guards take the server's state as an argument (each server wraps them as FastAPI dependencies on its own
state) and read only what `ServerState` says: the Host names, the tokens and the body limits of its options.
Bodies are read here rather than by FastAPI's body parameters because the limits must hold before anything is
parsed, and because the 422s must look like run-api's.
"""
from __future__ import annotations

import base64
import ipaddress
import socket
import zlib
from typing import Protocol

import orjson
from fastapi import HTTPException, Request
from starlette.requests import ClientDisconnect

from edge.errors import BadInput, TooLarge
from edge.options import ServerOptions


class ServerState(Protocol):
    """What the guards read of a server's state (ingest/state.py IngestState, serving/http.py ServingState): the
    Host header names it accepts besides addresses (None: any), and its options (the tokens, the body limits)."""

    @property
    def host_names(self) -> frozenset[str] | None: ...

    @property
    def config(self) -> ServerOptions: ...


# Bodies the write routes take: what atroposlib's BaseEnv and example trainer send (application/json, gzipped
# or not: docs/atropos-api.md) and NDJSON. A browser sends text/plain, a form type or none without asking the
# server first (a CORS "simple request"), so anything else is refused before the body is read.
JSON_TYPES = frozenset({"application/json", "application/x-ndjson", "application/ndjson", "application/jsonl",
                        "application/x-jsonlines"})


def host_names(host: str, allowed_hosts: str | None) -> frozenset[str] | None:
    """The names a client may put in the Host header besides IP addresses (None: any name): localhost, the
    bound host, this machine's names and `--allowed-hosts`."""
    extra = {h.strip().lower().rstrip(".") for h in (allowed_hosts or "").split(",") if h.strip()}
    if "*" in extra:
        return None
    return frozenset({"localhost", host.lower(), socket.gethostname().lower(), socket.getfqdn().lower()} | extra)


def _host_name(value: str) -> str:
    """`name:8000`, `[::1]:8000`, `127.0.0.1` -> the name or address alone."""
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


async def check_host(request: Request, state: ServerState) -> None:
    """Every route: a Host header naming something else than this server is a page whose DNS name was rebound
    to this address (it could then read /batch and write like a local client): 403. A rebound name is never an
    IP address, so addresses always pass."""
    host = request.headers.get("host")
    if state.host_names is None or host is None:
        return
    name = _host_name(host.strip().lower()).rstrip(".")
    if name not in state.host_names and not _is_address(name):
        raise HTTPException(403, f"Host {host!r} is not a name of this server (a DNS-rebinding guard): connect by "
                                 f"address or localhost, or start it with --allowed-hosts {name}")


async def same_origin(request: Request) -> None:
    """Write routes: a request a web page made (browsers send Origin / Sec-Fetch-Site; other clients do not)
    from another origin is refused (403), so a page cannot write into the lake or drain /batch."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
        raise HTTPException(403, f"cross-origin request from {origin!r} refused: write routes serve clients, "
                                 "not web pages")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise HTTPException(403, f"a {site} request from a web page refused: write routes serve clients")


async def json_content_type(request: Request) -> None:
    """POST bodies must say they are JSON (or NDJSON); 415 otherwise (checked before the body is read)."""
    if request.method != "POST":
        return
    ct = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ct not in JSON_TYPES and not ct.endswith("+json"):
        raise HTTPException(415, f"Content-Type {ct or '(none)'} refused: send application/json "
                                 "(or application/x-ndjson)")


# The browser's login (ui/login.py serves its form): a browser cannot send the bearer header, so POST /ui/login takes
# the token in a form and hands it back as a cookie (HttpOnly, SameSite=Strict, Path=/ui). The cookie is a credential
# for the pages only: taken on GET and HEAD of /ui paths, never on a route that writes into the lake nor on the JSON
# API (a cross-site form cannot POST into the lake with it, and `lake serve`'s GET /batch, which drains the queue,
# never sees it); the one POST it is taken on is the UI's export button (EXPORT_PREFIX below), behind a CSRF token.
PAGES = "/ui"
LOGIN_PATH = "/ui/login"
LOGOUT_PATH = "/ui/logout"
STYLESHEET_PATH = "/ui/static/ui.css"
TOKEN_COOKIE = "lachesis_token"
COOKIE_METHODS = frozenset({"GET", "HEAD"})
# the routes a client without the token may call: a liveness probe, the login form (and its stylesheet), the logout
OPEN_PATHS = frozenset({"/v1/health", LOGIN_PATH, LOGOUT_PATH, STYLESHEET_PATH})
# The one exception to "the cookie never opens a write": the UI's export button (ui/exports.py), a POST to
# /ui/views/<view>/export, which writes a dataset folder into `lake ui --exports` (never into the lake) and which the
# route itself refuses unless it carries the CSRF token of the page that showed the button (bound to this cookie)
# and comes from this origin. No other POST, and nothing outside /ui, takes the cookie.
EXPORT_PREFIX, EXPORT_SUFFIX = PAGES + "/views/", "/export"


def is_export(request: Request) -> bool:
    """Whether the request is the UI's export button's POST (where the login cookie counts too)."""
    path = request.url.path
    return request.method == "POST" and path.startswith(EXPORT_PREFIX) and path.endswith(EXPORT_SUFFIX)


def is_page(request: Request) -> bool:
    """Whether the request reads a page under /ui (where the login cookie counts)."""
    path = request.url.path
    return request.method in COOKIE_METHODS and (path == PAGES or path.startswith(PAGES + "/"))


def cookie_value(token: str) -> str:
    """The login cookie's value for `token`: base64url, so any visible ASCII (`;`, `,`, quotes) travels intact."""
    return base64.urlsafe_b64encode(token.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def cookie_token(request: Request) -> str | None:
    """The token the login cookie holds, on a page read (is_page) or the export button's POST (is_export) only;
    None without one (or a malformed one)."""
    raw = request.cookies.get(TOKEN_COOKIE) if is_page(request) or is_export(request) else None
    if not raw or len(raw) > 8192:
        return None
    try:
        return base64.urlsafe_b64decode(raw.encode("ascii") + b"=" * (-len(raw) % 4)).decode("utf-8")
    except (ValueError, UnicodeError):
        return None


async def require_token(request: Request, state: ServerState) -> None:
    """Every route (an app dependency): with tokens set, `Authorization: Bearer <token>` of one of them is required,
    checked before the body is read, and its name becomes `request.state.client`. Reads too (`lake serve`'s
    /latest_example, /batch and /v1/stats hand out what was posted). Only OPEN_PATHS answer without it. A page
    read (is_page) or the UI's export POST (is_export, whose route checks a CSRF token) without the header takes
    the login cookie instead, and without a valid one is sent to the login
    form (303) rather than answered 401. One lookup by the header's digest (edge/tokens.py Tokens): constant time
    whatever the number of tokens, and safe against timing. `request.state.server`: the state that guarded it (the
    login form checks its token against the same tokens)."""
    tokens = state.config.tokens
    request.state.server = state
    request.state.client = ""  # no tokens, or one: every client is the one identity
    if not tokens or request.url.path in OPEN_PATHS:
        return
    header = request.headers.get("authorization")
    if header is None and (is_page(request) or is_export(request)):
        token = cookie_token(request)
        client = None if token is None else tokens.client(f"Bearer {token}")
        if client is None:
            raise HTTPException(303, "log in first", headers={"Location": LOGIN_PATH})
    else:
        client = tokens.client(header or "")
    if client is None:
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
    request.state.client = client  # the token's name ("" for a lone token): the model server's client identity


async def admit(request: Request, state: ServerState) -> None:
    """What every server's app-wide guard does first, in this order: the Host check, then the token (before any
    body is read). `lake serve`, `lake serve-model` and `lake ui` each call it with their own state."""
    await check_host(request, state)
    await require_token(request, state)


def login_client(state: ServerState, token: str) -> str | None:
    """The name of the client whose token the login form was given (as require_token checks a header), else None."""
    return state.config.tokens.client(f"Bearer {token}")


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body as sent, refused past `limit` bytes (declared size, then streamed size)."""
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise BadInput("bad Content-Length header") from None
        if n > limit:
            raise TooLarge(f"body of {n} bytes is over the limit of {limit} bytes")
    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"body is over the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed by the read timeout (edge.limits): nobody to answer
        raise BadInput("the client went away before sending the whole body", kind="disconnected") from None
    return b"".join(chunks)


async def read_body(request: Request, state: ServerState) -> bytes:
    """The request body within the limits: declared size, streamed size, then inflated size for gzip."""
    data = await read_limited(request, state.config.max_body)
    enc = request.headers.get("content-encoding", "").lower()
    if "gzip" in enc:
        return gunzip_bounded(data, state.config.inflated_limit(len(data)))
    if enc and enc != "identity":
        raise BadInput(f"unsupported Content-Encoding {enc!r} (gzip or identity)", status=415, kind="encoding")
    return data


def parse_json(data: bytes):
    """A request body as JSON; an empty or malformed body is a 422 that says what is wrong (and where)."""
    if not data.strip():
        raise BadInput("Field required", field=["body"], status=422, kind="missing")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = f"JSON decode error: {exc}"
        if "utf-8" in str(exc).lower():
            msg = f"body is not valid UTF-8: {exc}"
        raise BadInput(msg, field=["body", exc.pos], status=422, kind="json_invalid") from None


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """Inflate a (possibly multi-member) gzip body, refusing more than `limit` bytes of output.

    Raises BadInput('Invalid gzip payload') for data that is not gzip or is truncated, TooLarge for a
    body that inflates past the limit (a gzip bomb), without ever holding more than limit+64 KiB.
    """
    out = []
    total = 0
    buf = memoryview(data)
    if not data:
        return b""
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            while True:
                chunk = d.decompress(buf, 65536)
                total += len(chunk)
                if total > limit:
                    raise TooLarge(f"gzip body inflates past the limit of {limit} bytes")
                out.append(chunk)
                buf = d.unconsumed_tail
                if d.eof or not buf:
                    break
            if not d.eof:
                # flush what is left; an incomplete stream is an error
                rest = d.flush()
                total += len(rest)
                if total > limit:
                    raise TooLarge(f"gzip body inflates past the limit of {limit} bytes")
                out.append(rest)
                if not d.eof:
                    raise BadInput("Invalid gzip payload: truncated gzip stream", kind="bad_gzip")
        except zlib.error as exc:
            raise BadInput(f"Invalid gzip payload: {exc}", kind="bad_gzip") from None
        rest = d.unused_data
        if not rest or not rest.strip(b"\x00"):
            break
        buf = memoryview(rest)
    return b"".join(out)
