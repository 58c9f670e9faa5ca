"""The HTTP edges shared by both route sets: the app state and auth dependencies, request bodies (size limits,
gzip, JSON, pydantic models) as dependencies, JSON responses, and the error answers.

Bodies are read here rather than by FastAPI's body parameters because the limits (declared and streamed
size, inflated size) must hold before anything is parsed, and because the 422s must look like run-api's.
"""
from __future__ import annotations

import asyncio
import gzip
import hashlib
import ipaddress
import json
import socket
from typing import Callable

import orjson
from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from ingest import atropos as A
from ingest.dedupe import Idempotency
from ingest.errors import BadInput, TooLarge
from ingest.state import IngestState
from ingest.util import gunzip_bounded


class ValidationDetail(Exception):
    """A 422 whose `detail` list is already in FastAPI's shape (pydantic errors, run-api compatible)."""

    def __init__(self, detail: list[dict]):
        super().__init__(detail)
        self.detail = detail


# -- dependencies (async: FastAPI would run plain functions in its thread pool, on every request) -----------
async def get_state(request: Request) -> IngestState:
    return request.app.state.ingest


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


async def check_host(request: Request, state: IngestState = Depends(get_state)) -> None:
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


OPEN_PATHS = frozenset({"/v1/health"})  # the only route a client without the token may call (a liveness probe)


async def require_token(request: Request, state: IngestState = Depends(get_state)) -> None:
    """Every route (an app dependency): with tokens set, `Authorization: Bearer <token>` of one of them is required,
    checked before the body is read, and its name becomes `request.state.client`. Reads too: /latest_example,
    /batch and /v1/stats hand out what was posted. Only /v1/health answers without it. One lookup by the header's
    digest (ingest/config.py Tokens): constant time whatever the number of tokens, and safe against timing."""
    tokens = state.config.tokens
    request.state.client = ""  # no tokens, or one: every client is the one identity
    if not tokens or request.url.path in OPEN_PATHS:
        return
    client = tokens.client(request.headers.get("authorization", ""))
    if client is None:
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
    request.state.client = client  # the token's name ("" for a lone token): the model server's client identity


WRITE = [Depends(same_origin), Depends(json_content_type)]


async def expect_trajectories(state: IngestState = Depends(get_state)):
    """Declared before the body: tells the trajectories batcher this request is on its way (TableBatcher
    gathers the requests being parsed into one version); released when the rows are handed over, or at the end."""
    with state.expect("trajectories") as expected:
        yield expected


async def body_bytes(request: Request, state: IngestState = Depends(get_state)) -> bytes:
    """The request body within the limits: declared size, streamed size, then inflated size for gzip."""
    limit = state.config.max_body
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
    except ClientDisconnect:  # gone, or closed by the read timeout (ingest.http_limits): nobody to answer
        raise BadInput("the client went away before sending the whole body", kind="disconnected") from None
    data = b"".join(chunks)
    enc = request.headers.get("content-encoding", "").lower()
    if "gzip" in enc:
        return gunzip_bounded(data, state.config.inflated_limit(len(data)))
    if enc and enc != "identity":
        raise BadInput(f"unsupported Content-Encoding {enc!r} (gzip or identity)", status=415, kind="encoding")
    return data


async def idempotency(request: Request, data: bytes = Depends(body_bytes)) -> Idempotency | None:
    """The request's Idempotency-Key with its body's hash (None without a key)."""
    key = request.headers.get("idempotency-key")
    return Idempotency(key, hashlib.sha256(data).hexdigest()) if key else None


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


async def json_body(data: bytes = Depends(body_bytes)):
    return parse_json(data)


def validate_model(model: type[BaseModel], obj, prefix=("body",)):
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise ValidationDetail(A.validation_detail(exc, prefix=prefix)) from None


def model_body(model: type[BaseModel]) -> Callable:
    """A dependency: the JSON body validated as `model` (422 in run-api's shape otherwise)."""

    async def dep(obj=Depends(json_body)):
        return validate_model(model, obj)

    return dep


# -- responses ---------------------------------------------------------------------------------------------
def wants_gzip(request: Request) -> bool:
    return "gzip" in request.headers.get("accept-encoding", "").lower()


def json_response(request: Request, obj=None, *, raw: bytes | None = None) -> Response:
    """JSON (ints beyond 64 bits kept, non-string keys allowed), gzipped from 1000 bytes when the client asks."""
    body = raw if raw is not None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    if len(body) >= 1000 and wants_gzip(request):
        return _gzipped(gzip.compress(body, compresslevel=1))
    return Response(body, media_type="application/json")


async def json_response_async(request: Request, raw: bytes) -> Response:
    """json_response for big bodies: gzip (which releases the GIL) runs in a worker thread."""
    if len(raw) >= 64 * 1024 and wants_gzip(request):
        return _gzipped(await asyncio.to_thread(gzip.compress, raw, 1))
    return json_response(request, raw=raw)


def _gzipped(body: bytes) -> Response:
    return Response(body, media_type="application/json",
                    headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})


def bigjson(obj) -> Response:
    """JSON with ints beyond 64 bits (the /register uuid) written as plain numbers (orjson refuses them)."""
    return Response(json.dumps(obj).encode(), media_type="application/json")


# -- errors ------------------------------------------------------------------------------------------------
def bad_input_response(exc: BadInput) -> Response:
    if exc.status == 422:
        d = exc.to_detail()
        if not d["loc"] or d["loc"][0] != "body":
            d["loc"] = ["body"] + d["loc"]
        return JSONResponse({"detail": [d]}, status_code=422)
    if exc.kind == "bad_gzip":
        return PlainTextResponse("Invalid gzip payload", status_code=400)  # run-api's exact answer
    body = {"detail": exc.describe(), "type": exc.kind}
    if exc.line is not None:
        body["line"] = exc.line
    if exc.field is not None:
        body["field"] = exc.field_str()
    return JSONResponse(body, status_code=exc.status)
