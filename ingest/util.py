"""Small shared helpers: JSON decoding with good errors, stable hashes (ids: ground/ids.py)."""
from __future__ import annotations

import hashlib

import orjson

from edge.errors import BadInput


def loads(data: bytes | str, *, line: int | None = None):
    """orjson.loads with a BadInput naming the problem (invalid JSON / not UTF-8)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = str(exc)
        if "utf-8" in msg.lower() or "surrogate" in msg.lower():
            raise BadInput(f"not valid UTF-8: {msg}", line=line, kind="bad_encoding") from None
        raise BadInput(f"malformed JSON: {msg}", line=line, kind="json_invalid") from None


def dumps(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def canonical(obj) -> bytes:
    """Sorted-key JSON of a record (what its content id hashes); BadInput for one nested beyond orjson's 254
    levels (valid JSON parses up to 1024: a 422 or a rejected file, never a 500 or a traceback)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as exc:
        why = "nested more than 254 levels deep" if "recursion" in str(exc).lower() else str(exc)
        raise BadInput(f"record cannot be stored as JSON: {why}", status=422, kind="too_deep") from None


def stable_hash(obj, n: int = 16) -> str:
    """blake2b hex of canonical JSON (n bytes)."""
    data = obj if isinstance(obj, (bytes, bytearray)) else canonical(obj)
    return hashlib.blake2b(data, digest_size=n).hexdigest()


def text_hash(text: str | bytes, n: int = 16) -> str:
    if isinstance(text, str):
        text = text.encode("utf-8")
    return hashlib.blake2b(text, digest_size=n).hexdigest()


def excerpt(data, n: int = 200) -> str:
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data[:n]).decode("utf-8", "replace")
    else:
        data = str(data)[:n]
    return data
