"""Validation of native JSON records against a table's payload schema (pure: dict in, row dict out).

One checker walks the Arrow schema, so the schema in `schemas.py` is the single source of truth. Errors
carry the record index and the field path (`messages[2].tool_calls[0].name`) so callers can name the line.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from ground.errors import UserError
from lake.schemas import DEFAULT_EVENT_TYPES, PAYLOADS, json_columns

# Record keys that fill envelope columns instead of payload columns.
ENVELOPE_INPUTS = {"event_type", "occurred_at"}


class RecordError(UserError, ValueError):
    """A record that does not fit its table. `index` is the record's position in the batch."""

    def __init__(self, index: int, field: str, message: str):
        self.index, self.field, self.message = index, field, message
        super().__init__(f"record {index}: field '{field}': {message}")


@dataclass(frozen=True)
class Row:
    payload: dict[str, Any]
    event_type: str
    occurred_at: dt.datetime | None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _check(value: Any, typ: pa.DataType, path: str, unknown: dict[str, Any]) -> Any:
    """Return `value` converted to what Arrow stores for `typ`, or raise ValueError naming `path`."""
    if value is None:
        return None
    if pa.types.is_string(typ):
        if isinstance(value, str):
            return value
        raise _err(path, f"expected a string, got {_type_name(value)}")
    if pa.types.is_boolean(typ):
        if isinstance(value, bool):
            return value
        raise _err(path, f"expected a boolean, got {_type_name(value)}")
    if pa.types.is_integer(typ):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _err(path, f"expected an integer, got {_type_name(value)}")
    if pa.types.is_floating(typ):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and math.isnan(value):
                return None
            return float(value)
        raise _err(path, f"expected a number, got {_type_name(value)}")
    if pa.types.is_list(typ):
        if not isinstance(value, list):
            raise _err(path, f"expected an array, got {_type_name(value)}")
        fast = _FAST_LIST.get(typ.value_type.id)
        if fast is not None and all(type(v) in fast for v in value):
            return value  # token ids, logprobs, tags: one type check per element, no recursion
        return [_check(v, typ.value_type, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    if pa.types.is_struct(typ):
        if not isinstance(value, dict):
            raise _err(path, f"expected an object, got {_type_name(value)}")
        value = _normalize_struct(value, typ)
        names = {typ.field(i).name for i in range(typ.num_fields)}
        extra = {k: v for k, v in value.items() if k not in names}
        if extra:
            unknown[path] = extra
        out = {}
        for i in range(typ.num_fields):
            f = typ.field(i)
            out[f.name] = _check(value.get(f.name), f.type, f"{path}.{f.name}", unknown)
        return out
    raise _err(path, f"unsupported type {typ}")  # pragma: no cover - schemas only use the types above


# Element types for which a list passes as is when every element has exactly one of these Python types
# (`type(v) in`, so True never passes as an int); anything else takes the element-by-element path and its errors.
_FAST_LIST = {
    pa.int64().id: (int,),
    pa.float64().id: (float, int),
    pa.string().id: (str,),
}


def _normalize_struct(value: dict[str, Any], typ: pa.StructType) -> dict[str, Any]:
    """Accept the common spellings of nested objects: OpenAI tool calls and non-string contents."""
    names = {typ.field(i).name for i in range(typ.num_fields)}
    if names == {"id", "name", "arguments"} and "function" in value and isinstance(value["function"], dict):
        fn = value["function"]
        value = {"id": value.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments"),
                 **{k: v for k, v in value.items() if k not in ("id", "function", "type")}}
    if "arguments" in names and isinstance(value.get("arguments"), (dict, list)):
        value = {**value, "arguments": orjson.dumps(value["arguments"]).decode()}
    if "content" in names and isinstance(value.get("content"), list):
        # OpenAI content parts: keep the text, the parts themselves go to raw via the unknown-key path.
        parts = value["content"]
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        value = {**value, "content": text, "content_parts": parts}
    return value


def _err(path: str, message: str) -> ValueError:
    e = ValueError(message)
    e.path = path  # type: ignore[attr-defined]
    return e


def parse_time(value: Any) -> dt.datetime:
    """ISO-8601 text, epoch seconds or a datetime -> an aware UTC datetime."""
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            t = dt.datetime.fromtimestamp(value, tz=dt.timezone.utc)
        except (OverflowError, OSError) as exc:  # 1e20 seconds: beyond any calendar (a 422, not a 500)
            raise ValueError(f"epoch seconds {value!r} out of range: {exc}") from None
    elif isinstance(value, str):
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise ValueError(f"expected an ISO-8601 string or epoch seconds, got {_type_name(value)}")
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def validate_record(table: str, record: Any, index: int = 0) -> Row:
    """Check one native record for `table` and return its payload row (every column present)."""
    if not isinstance(record, dict):
        raise RecordError(index, "<record>", f"expected a JSON object, got {_type_name(record)}")
    fields = PAYLOADS[table]
    names = {f.name for f in fields}
    jsons = json_columns(table)
    unknown: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    for f in fields:
        value = record.get(f.name)
        if value is None and not f.nullable:
            raise RecordError(index, f.name, "required field is missing")
        if f.name in jsons:
            try:
                payload[f.name] = _json_text(value)
            except ValueError as e:
                raise RecordError(index, f.name, str(e)) from None
            continue
        try:
            payload[f.name] = _check(value, f.type, f.name, unknown)
        except ValueError as e:
            raise RecordError(index, getattr(e, "path", f.name), str(e)) from None
        if not f.nullable and isinstance(payload[f.name], str) and not payload[f.name].strip():
            raise RecordError(index, f.name, "required field is empty")
    _require_messages(table, payload, index)
    extra = {k: v for k, v in record.items() if k not in names and k not in ENVELOPE_INPUTS}
    if unknown:
        extra["_nested_unknown"] = unknown
    if extra and payload.get("raw") is None:
        try:
            payload["raw"] = _dumps(extra)
        except ValueError as e:
            raise RecordError(index, _unstorable_key(extra), str(e)) from None
    event_type = record.get("event_type") or DEFAULT_EVENT_TYPES[table]
    if not isinstance(event_type, str):
        raise RecordError(index, "event_type", f"expected a string, got {_type_name(event_type)}")
    occurred = None
    if record.get("occurred_at") is not None:
        try:
            occurred = parse_time(record["occurred_at"])
        except ValueError as e:
            raise RecordError(index, "occurred_at", str(e)) from None
    return Row(payload, event_type, occurred)


def _require_messages(table: str, payload: dict[str, Any], index: int) -> None:
    if table != "trajectories":
        return
    if payload["messages"] is None:
        raise RecordError(index, "messages", "required field is missing")
    for i, m in enumerate(payload["messages"]):
        if not m.get("role"):
            raise RecordError(index, f"messages[{i}].role", "required field is missing")


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            orjson.loads(value)
            return value
        except orjson.JSONDecodeError:
            # Plain text (a Hermes transcript, say) becomes a JSON string so SQL json functions still work.
            return orjson.dumps(value).decode()
    return _dumps(value)


def _dumps(value: Any) -> str:
    """JSON text of a value; ValueError for one orjson cannot write (nested more than 254 levels deep)."""
    try:
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError as exc:
        why = "nested more than 254 levels deep" if "recursion" in str(exc).lower() else str(exc)
        raise ValueError(f"cannot be stored as JSON: {why}") from None


def _unstorable_key(extra: dict[str, Any]) -> str:
    """The (first) unknown key whose value cannot be written as JSON: the field an error names."""
    for k, v in extra.items():
        try:
            _dumps(v)
        except ValueError:
            return k
    return "raw"


def validate_records(table: str, records: list[Any]) -> list[Row]:
    if table not in PAYLOADS:
        raise KeyError(table)
    return [validate_record(table, r, i) for i, r in enumerate(records)]

