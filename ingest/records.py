"""Native records -> checked lake rows as Arrow columns, ready for one append.

The lake's record checker walks every value in Python. Trajectory records carry thousands of numbers each
(token ids, masks, logprobs), so those fields are taken out first and converted per column for the whole
request in one C call (`pa.array` of every record's list: the type check and the column the lake writes, in
one pass); only when that fails are the records looked at one by one, to name the record and field that is
wrong. The rest of each record goes through the lake's checker. `ArrowRows` is what the server's batcher and
the importer hand to the lake writer: no Python row dicts between the request and the committer.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa

from edge.errors import BadInput
from lake import RecordError
from lake.records import Row, validate_records
from lake.schemas import payload_schema

# What building an Arrow column from checked values can still fail with (a value the schema cannot hold).
BUILD_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
TIMESTAMP = pa.timestamp("us", tz="UTC")

_NUMERIC_LISTS = {"tokens": pa.int64(), "masks": pa.int64(), "inference_logprobs": pa.float64(),
                  "advantages": pa.float64()}


@lru_cache(maxsize=None)
def _schema(table: str) -> pa.Schema:
    return payload_schema(table)


def trajectory_type(column: str) -> pa.DataType:
    return _schema("trajectories").field(column).type


def payload_table(columns: dict[str, pa.Array], n: int, table: str = "trajectories") -> pa.Table:
    """Arrow columns (any subset of the table's payload columns) -> the full payload schema, the rest null."""
    schema = _schema(table)
    cols = []
    for f in schema:
        c = columns.get(f.name)
        cols.append(pa.nulls(n, f.type) if c is None else c if c.type == f.type else c.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


@dataclass
class ArrowRows:
    """Rows for one table: payload columns, and per row its event type and occurred_at (null: now)."""

    payload: pa.Table
    event_types: pa.Array
    occurred: pa.Array

    @classmethod
    def of(cls, payload: pa.Table, event_type: str, occurred=None) -> "ArrowRows":
        n = payload.num_rows
        return cls(payload, pa.array([event_type] * n, pa.string()), pa.array([occurred] * n, TIMESTAMP))

    @classmethod
    def from_rows(cls, rows: list[Row], table: str, columns: dict[str, pa.Array] | None = None) -> "ArrowRows":
        """Checked lake rows (plus columns built apart, which replace theirs) -> ArrowRows. BadInput (422) for a
        value the schema cannot hold."""
        columns = columns or {}
        schema = _schema(table)
        try:
            cols = [columns[f.name] if f.name in columns else pa.array([r.payload.get(f.name) for r in rows], f.type)
                    for f in schema]
            payload = pa.Table.from_arrays(cols, schema=schema)
        except BUILD_ERRORS as exc:
            raise BadInput(f"record does not fit the lake schema: {exc}", status=422, kind="schema") from None
        return cls(payload, pa.array([r.event_type for r in rows], pa.string()),
                   pa.array([r.occurred_at for r in rows], TIMESTAMP))

    @classmethod
    def concat(cls, parts: list["ArrowRows"]) -> "ArrowRows":
        if len(parts) == 1:
            return parts[0]
        return cls(pa.concat_tables([p.payload for p in parts]), pa.concat_arrays([p.event_types for p in parts]),
                   pa.concat_arrays([p.occurred for p in parts]))

    def submit(self, writer, table: str):
        """Queue these rows on the lake writer; -> the future of its AppendResult."""
        return writer.submit_arrow(table, self.payload, event_type=self.event_types, occurred_at=self.occurred)


@dataclass
class RowBatch:
    """Checked records: their lake rows and the columns built apart from them (numeric lists, messages)."""

    table: str
    rows: list[Row]
    columns: dict[str, pa.Array]

    def arrow(self, keep: list[int] | None = None) -> ArrowRows:
        """The rows (or those at the `keep` positions, ascending) as ArrowRows."""
        if keep is None or len(keep) == len(self.rows):
            return ArrowRows.from_rows(self.rows, self.table, self.columns)
        idx = pa.array(keep, pa.int64())
        return ArrowRows.from_rows([self.rows[i] for i in keep], self.table,
                                   {k: a.take(idx) for k, a in self.columns.items()})


def _path(prefix, loc, *rest) -> list:
    """A field path: the prefix, the record's index or line (None: a lone record), then the field parts."""
    return [*prefix, *([] if loc is None else [loc]), *rest]


def _numbers(arr_type: pa.DataType, typ: pa.DataType) -> bool:
    """Element type `arr_type` (inferred from JSON values) may be stored as `typ` (a safe cast checks values)."""
    return pa.types.is_null(arr_type) or pa.types.is_integer(arr_type) or (
        pa.types.is_floating(arr_type) and (pa.types.is_floating(typ) or pa.types.is_integer(typ)))


def _one_list(v, typ: pa.DataType, field: list) -> pa.Array:
    """One record's list as a one-row list<typ> array, or BadInput naming the field."""
    if v is None:
        return pa.nulls(1, pa.list_(typ))
    if not isinstance(v, list):
        raise BadInput(f"expected an array, got {type(v).__name__}", field=field, status=422, kind="schema")
    kind = "integers" if pa.types.is_integer(typ) else "numbers"
    try:
        arr = pa.array(v)
        if not _numbers(arr.type, typ):
            raise TypeError(f"elements are {arr.type}, expected numbers")
        return pa.array([arr.cast(typ, safe=True)], pa.list_(typ)) if len(arr) else pa.array([[]], pa.list_(typ))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise BadInput(f"expected an array of {kind}: {exc}", field=field, status=422, kind="schema") from None


def numeric_column(values: list, typ: pa.DataType, key: str, locs: list, prefix=("body",)) -> pa.Array:
    """Every record's list (None: absent) -> one list<typ> column. One C call for the request; record by
    record only when that fails, to name the record and field (BadInput, 422)."""
    try:
        arr = pa.array(values)
        if pa.types.is_null(arr.type):
            return pa.nulls(len(values), pa.list_(typ))
        if pa.types.is_list(arr.type) and _numbers(arr.type.value_type, typ):
            return arr.cast(pa.list_(typ), safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    return pa.concat_arrays([_one_list(v, typ, _path(prefix, loc, key)) for v, loc in zip(values, locs)])


def trajectory_ids(snap) -> set[str]:
    """Every trajectory id in a lake snapshot: the dedupe index of the server, the watcher and the importer."""
    return set(snap.arrow("SELECT trajectory_id FROM trajectories").column(0).to_pylist())


def split_field(field: str):
    out = []
    for part in field.replace("]", "").split("."):
        for j, p in enumerate(part.split("[")):
            if p == "":
                continue
            out.append(int(p) if j > 0 and p.isdigit() else p)
    return out


def _message_keys() -> tuple[frozenset, frozenset]:
    msg = trajectory_type("messages").value_type
    tc = msg.field("tool_calls").type.value_type
    return frozenset(msg.field(i).name for i in range(msg.num_fields)), frozenset(tc.field(i).name
                                                                                for i in range(tc.num_fields))


_MESSAGE_KEYS, _TOOL_CALL_KEYS = _message_keys()


def _lake_shaped(msgs) -> bool:
    """Messages already in the lake's struct shape, as the message model's normaliser gives them (transcript/messages.py):
    exactly the struct's keys, a role, tool calls of exactly their keys (the value types are Arrow's to check)."""
    return type(msgs) is list and all(
        type(m) is dict and m.keys() == _MESSAGE_KEYS and m["role"]
        and (m["tool_calls"] is None or type(m["tool_calls"]) is list
             and all(type(t) is dict and t.keys() == _TOOL_CALL_KEYS for t in m["tool_calls"]))
        for m in msgs)


def _messages_column(records: list[dict]) -> pa.Array | None:
    """The messages of every record as one column when all are lake-shaped and Arrow takes their values;
    None leaves them to the lake's checker (which walks each message in Python and names what is wrong)."""
    if not all(_lake_shaped(r.get("messages")) for r in records):
        return None
    try:
        return pa.array([r["messages"] for r in records], trajectory_type("messages"))
    except BUILD_ERRORS:
        return None


def validated_batch(records: list[dict], table: str = "trajectories", *, locs=None, prefix=("body",)) -> RowBatch:
    """Check records for `table`. Raises BadInput(field path, 422) for the first bad one; the caller's records
    stay whole. `locs[i]` names record i in that path (its index or line; None: a single record, no index).

    Trajectories' numeric lists and (already normalised) messages are taken out and built as columns in bulk;
    the lake's checker sees the rest (with `messages: []` standing in, as it requires the field)."""
    locs = locs if locs is not None else list(range(len(records)))
    keys = [k for k in _NUMERIC_LISTS if table == "trajectories" and any(k in r for r in records)]
    messages = _messages_column(records) if table == "trajectories" else None
    if messages is not None:
        keys.append("messages")
    present = {k: [k in r for r in records] for k in keys}
    taken = {k: [r.pop(k, None) for r in records] for k in keys}
    try:
        columns = {k: numeric_column(taken[k], _NUMERIC_LISTS[k], k, locs, prefix) for k in _NUMERIC_LISTS
                   if k in taken}
        if messages is not None:
            columns["messages"] = messages
            for r in records:
                r["messages"] = []
        rows = validate_records(table, records)
    except RecordError as exc:
        raise BadInput(exc.message, field=_path(prefix, locs[exc.index], *split_field(exc.field)), status=422,
                       kind="schema") from None
    finally:
        for k in keys:
            for r, had, v in zip(records, present[k], taken[k]):
                if had:
                    r[k] = v
    return RowBatch(table, rows, columns)


def append_records(writer, records: list[dict], table: str = "trajectories", *, locs=None):
    """Validate all (BadInput on the first bad one, its field path starting with its `locs` entry; nothing
    written), then one append. -> AppendResult."""
    return validated_batch(records, table, locs=locs, prefix=()).arrow().submit(writer, table).result()
