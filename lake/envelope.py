"""The event envelope, added to a payload table column by column (vectorised: the bulk path is the hot path).

`content_hash` is 32 hex digits from DuckDB's vectorised `hash()` of the payload's content columns and the
same hash salted (the salted half derives from the first: 64 bits of entropy, see `content_hashes`). Record appends and bulk Arrow appends both pass through here, so the same content
gets the same hash whichever way it arrived. md5 over a JSON rendering is several times slower and would cap
bulk appends far below the Parquet ceiling (docs/lake-design.md, "Figures behind the code"). The price: the value
is tied to DuckDB's hash function, which DuckDB may change in a major release; a lake that upgrades across such
a change re-hashes with `content_hashes` (the hash is only ever compared within one lake).
"""
from __future__ import annotations

import datetime as dt
import os
import threading

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ground.ids import COUNTER_BITS, uuid7_stamps
from lake.query import ident
from lake.schemas import payload_schema, table_schema

# Columns that identify an event rather than describe it, so they stay out of the content hash: the same
# episode sent twice under two ids hashes the same and the sft view can drop the copy.
IDENTITY_COLUMNS = {"trajectory_id", "group_id", "run_id", "metadata", "raw"}

# Byte -> its two lowercase hex digits, as one uint16 (memory order = text order): hex text of n bytes is one
# table lookup, not two shifts and two lookups.
_HEX2 = np.frombuffer(b"".join(f"{i:02x}".encode() for i in range(256)), dtype=np.uint16)


def _hex(raw: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2k) ASCII hex digits."""
    return _HEX2[raw].view(np.uint8).reshape(raw.shape[0], 2 * raw.shape[1])


def _strings(chars: np.ndarray) -> pa.Array:
    """A string array from an (n, width) block of ASCII, one row per string."""
    n, width = chars.shape
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars)))


def uuid7_array(n: int, now_ms: int | None = None) -> pa.Array:
    """n UUIDv7 strings (RFC 9562): 48-bit ms timestamp, version 7, variant 10, random tail.

    The ground's one rule (ground/ids.py): n consecutive stamps (the ms and a 26-bit counter in rand_a and the top
    of rand_b, method 1 of RFC 9562 section 6.2), after every id this process made before, so event ids sort in
    creation order within a call, across calls and beside `uuid7()`'s; only the formatting is vectorised here.
    """
    if n == 0:
        return pa.array([], pa.string())
    first = uuid7_stamps(n, now_ms)
    counter = np.uint64(first & ((1 << COUNTER_BITS) - 1)) + np.arange(n, dtype=np.uint64)
    ms = np.uint64(first >> COUNTER_BITS) + (counter >> np.uint64(COUNTER_BITS))  # a full counter borrows a ms
    seq = (counter & np.uint64((1 << COUNTER_BITS) - 1)).astype(np.uint32)
    raw = np.empty((n, 16), dtype=np.uint8)
    for k in range(6):
        raw[:, k] = (ms >> np.uint64(8 * (5 - k))).astype(np.uint8)  # astype(uint8) keeps the low 8 bits
    raw[:, 6] = 0x70 | (seq >> 22).astype(np.uint8)
    raw[:, 7] = (seq >> 14).astype(np.uint8)
    raw[:, 8] = 0x80 | ((seq >> 8) & 0x3F).astype(np.uint8)
    raw[:, 9] = seq.astype(np.uint8)
    raw[:, 10:16] = np.frombuffer(os.urandom(6 * n), dtype=np.uint8).reshape(n, 6)
    hexed = _hex(raw)
    out = np.empty((n, 36), dtype=np.uint8)
    out[:, [8, 13, 18, 23]] = ord("-")
    out[:, 0:8], out[:, 9:13], out[:, 14:18], out[:, 19:23], out[:, 24:36] = (
        hexed[:, 0:8], hexed[:, 8:12], hexed[:, 12:16], hexed[:, 16:20], hexed[:, 20:32])
    return _strings(out)


_HASH_LOCK = threading.Lock()
_hash_con: duckdb.DuckDBPyConnection | None = None
_salt_hash = np.uint64(0)


def content_hashes(payload: pa.Table) -> pa.Array:
    """32 hex digits per row, the values of `printf('%016x%016x', hash(row), hash(row, 'lachesis'))` in DuckDB.

    DuckDB hashes a multi-argument call by combining the per-argument hashes, so the salted half is a function
    of the first (`_combine`, DuckDB's vector_hash combine): DuckDB hashes each row once (the struct of the
    nested messages is the cost, which a second hash would double) and numpy
    derives the second half and writes the hex. It follows that the value carries 64 bits of entropy, not 128.
    """
    global _hash_con, _salt_hash
    if payload.num_rows == 0:  # lake.delta.append asks for the columns with an empty slice: no DuckDB round trip
        return pa.array([], pa.string())
    content = payload.select([c for c in payload.column_names if c not in IDENTITY_COLUMNS])
    # Record batches of 8k rows let DuckDB hash on every core; insertion order is preserved.
    data = pa.Table.from_batches(content.to_batches(max_chunksize=8192), content.schema)
    row = "struct_pack(" + ", ".join(f"{ident(c)} := {ident(c)}" for c in content.column_names) + ")"
    with _HASH_LOCK:  # one connection for the process: opening one costs ~15 ms, more than hashing a batch
        if _hash_con is None:
            _hash_con = duckdb.connect()
            _salt_hash = np.uint64(_hash_con.sql("SELECT hash('lachesis')").fetchall()[0][0])
        _hash_con.register("payload", data)
        try:
            first = _hash_con.execute(f"SELECT hash({row}) AS h FROM payload").fetchnumpy()["h"]  # no relation object
        finally:
            _hash_con.unregister("payload")
    first = np.asarray(first, dtype=np.uint64)
    return hex_pairs(first, _combine(first, _salt_hash))


def _combine(left: np.ndarray, right: np.uint64) -> np.ndarray:
    """DuckDB's CombineHashScalar: (left ^ left >> 32) * 0xd6e8feb86659fd93 ^ right, modulo 2**64."""
    mixed = (left ^ (left >> np.uint64(32))) * np.uint64(0xD6E8FEB86659FD93)
    return mixed ^ right


def hex_pairs(a: np.ndarray, b: np.ndarray) -> pa.Array:
    """Row i is a[i] then b[i] as 16 lowercase hex digits each (big-endian), built in bulk."""
    raw = np.empty((len(a), 2), dtype=">u8")
    raw[:, 0], raw[:, 1] = a, b
    return _strings(_hex(raw.view(np.uint8).reshape(len(a), 16)))


def complete_payload(table: str, payload: pa.Table) -> pa.Table:
    """The payload with every column of the table's payload schema, missing ones as nulls, in schema order."""
    schema = payload_schema(table)
    unknown = [c for c in payload.column_names if c not in schema.names]
    if unknown:
        raise ValueError(f"columns not in the {table} schema: {', '.join(unknown)}")
    missing = [f for f in schema if f.name not in payload.column_names]
    for f in missing:
        if not f.nullable:
            raise ValueError(f"required column '{f.name}' is missing")
    cols = [payload.column(f.name) if f.name in payload.column_names else pa.nulls(payload.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays([c.cast(f.type) if c.type != f.type else c for c, f in zip(cols, schema)],
                                schema=schema)


TIMESTAMP = pa.timestamp("us", tz="UTC")


def _repeat(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value])).cast(pa.string())


def add_envelope(
    table: str,
    payload: pa.Table,
    *,
    sources: str | list[tuple[str, int]],
    schema_version: int,
    event_types: pa.Array | str,
    occurred_at: pa.Array | None = None,
    hashed: bool = True,
) -> pa.Table:
    """Return `payload` with every envelope column and `day`, in the table's column order and types.

    `sources` is one writer id for all rows, or (writer id, row count) runs for a group of batches.
    `hashed=False` leaves `content_hash` out, for `with_content_hash` to add it to any subset of the rows
    later (the lake's writer hashes each day partition in the thread that writes it).
    """
    payload = complete_payload(table, payload)
    n = payload.num_rows
    now = dt.datetime.now(dt.timezone.utc)
    ingested = pa.array(np.full(n, int(now.timestamp() * 1_000_000), dtype=np.int64), pa.int64()).cast(TIMESTAMP)
    if occurred_at is None:
        occurred = ingested
    else:
        occurred = pc.if_else(pc.is_null(occurred_at), ingested, occurred_at.cast(TIMESTAMP))
    # UTC day via date32: vectorised, where strftime formats row by row
    day = occurred.cast(pa.timestamp("us")).cast(pa.date32()).cast(pa.string())
    if isinstance(event_types, str):
        event_types = _repeat(event_types, n)
    if isinstance(sources, str):
        sources = [(sources, n)]
    env = {
        "event_id": uuid7_array(n, int(now.timestamp() * 1000)),
        "event_type": event_types,
        "schema_version": pa.array(np.full(n, schema_version, dtype=np.int32)),
        "occurred_at": occurred,
        "ingested_at": ingested,
        "source": pa.concat_arrays([_repeat(s, k) for s, k in sources]) if sources else pa.array([], pa.string()),
        "day": day,
    }
    if hashed:
        env["content_hash"] = content_hashes(payload)
    schema = pa.schema([f for f in table_schema(table) if hashed or f.name != "content_hash"])
    columns = []
    for f in schema:
        col = env[f.name] if f.name in env else payload.column(f.name)
        columns.append(col.cast(f.type) if col.type != f.type else col)
    return pa.Table.from_arrays(columns, schema=schema)


def with_content_hash(table: str, data: pa.Table) -> pa.Table:
    """`data` (enveloped rows of `table` without content_hash, with or without `day`) with content_hash added
    in its schema position; the hash reads only the payload columns, so it equals add_envelope's."""
    hashes = content_hashes(data.select(payload_schema(table).names))
    names = [n for n in table_schema(table).names if n in data.column_names or n == "content_hash"]
    return data.add_column(names.index("content_hash"), table_schema(table).field("content_hash"), hashes)
