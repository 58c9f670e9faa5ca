"""`lake serve`'s HTTP edge over the shared one (edge/guards.py: the Host check, the bearer token, same-origin and
JSON content type on POSTs, the size-limited body), as dependencies on its state: the app state, request bodies
(JSON, pydantic models, the Idempotency-Key), JSON responses, and the error answers in run-api's shape.
"""
from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from typing import Callable

import orjson
from fastapi import Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError

from edge.errors import BadInput
from edge.guards import admit, json_content_type, parse_json, read_body, same_origin
from ingest import atropos as A
from ingest.dedupe import Idempotency
from ingest.state import IngestState


class ValidationDetail(Exception):
    """A 422 whose `detail` list is already in FastAPI's shape (pydantic errors, run-api compatible)."""

    def __init__(self, detail: list[dict]):
        super().__init__(detail)
        self.detail = detail


# -- dependencies (async: FastAPI would run plain functions in its thread pool, on every request) -----------
async def get_state(request: Request) -> IngestState:
    return request.app.state.ingest


async def guard(request: Request, state: IngestState = Depends(get_state)) -> None:
    """Every route (the app's dependency): the Host check, then the bearer token, before the body is read."""
    await admit(request, state)


WRITE = [Depends(same_origin), Depends(json_content_type)]


async def expect_trajectories(state: IngestState = Depends(get_state)):
    """Declared before the body: tells the trajectories batcher this request is on its way (TableBatcher
    gathers the requests being parsed into one version); released when the rows are handed over, or at the end."""
    with state.expect("trajectories") as expected:
        yield expected


async def body_bytes(request: Request, state: IngestState = Depends(get_state)) -> bytes:
    """The request body within the limits (edge/guards.py read_body: declared, streamed and inflated size)."""
    return await read_body(request, state)


async def idempotency(request: Request, data: bytes = Depends(body_bytes)) -> Idempotency | None:
    """The request's Idempotency-Key with its body's hash (None without a key)."""
    key = request.headers.get("idempotency-key")
    return Idempotency(key, hashlib.sha256(data).hexdigest()) if key else None


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
