"""Fast validation + append of native trajectory records.

The lake's record checker walks every element in Python; Atropos-sized records (thousands of token ids,
masks and logprobs per sequence) are checked here with Arrow instead, and the rest with the lake's checker,
then appended through the Arrow path (one submit).
"""
from __future__ import annotations

import pyarrow as pa
from deltalake.exceptions import DeltaError

from ingest.errors import BadInput
from lake import RecordError
from lake.records import validate_records
from lake.schemas import payload_schema


# What a lake append can fail with (Delta log, storage, the writer's sequence check, the Arrow envelope).
LAKE_ERRORS = (DeltaError, OSError, RuntimeError, pa.ArrowException)

_NUMERIC_LISTS = {"tokens": pa.int64(), "masks": pa.int64(), "inference_logprobs": pa.float64(),
                  "advantages": pa.float64()}


def take_numeric_lists(rec: dict, loc, prefix=("body",)) -> dict:
    """Pop and check the long numeric list fields with Arrow (C speed); the lake's checker walks Python."""
    out = {}
    for key, typ in _NUMERIC_LISTS.items():
        if key not in rec:
            continue
        v = rec.pop(key)
        if v is None:
            out[key] = None
            continue
        if not isinstance(v, list):
            raise BadInput(f"expected an array, got {type(v).__name__}", field=_path(prefix, loc, key), status=422,
                           kind="schema")
        try:
            arr = pa.array(v)
            if pa.types.is_null(arr.type):
                pass
            elif pa.types.is_integer(arr.type) or (pa.types.is_floating(arr.type) and pa.types.is_floating(typ)):
                pass
            elif pa.types.is_floating(arr.type):
                arr.cast(typ, safe=True)  # raises for 1.5 in an integer list
            else:
                raise TypeError(f"elements are {arr.type}, expected numbers")
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise BadInput(f"expected an array of {'integers' if pa.types.is_integer(typ) else 'numbers'}: {exc}",
                           field=_path(prefix, loc, key), status=422, kind="schema") from None
        out[key] = v
    return out


def trajectory_ids(snap) -> set[str]:
    """Every trajectory id in a lake snapshot: the dedupe index of the server, the watcher and the importer."""
    return set(snap.arrow("SELECT trajectory_id FROM trajectories").column(0).to_pylist())


def _path(prefix, loc, *rest) -> list:
    """A field path: the prefix, the record's index or line (None: a lone record), then the field parts."""
    return [*prefix, *([] if loc is None else [loc]), *rest]


def split_field(field: str):
    out = []
    for part in field.replace("]", "").split("."):
        for j, p in enumerate(part.split("[")):
            if p == "":
                continue
            out.append(int(p) if j > 0 and p.isdigit() else p)
    return out


def validated_rows(records: list[dict], table: str = "trajectories", *, locs=None, prefix=("body",)):
    """-> lake Rows with the numeric lists checked by Arrow. Raises BadInput(field path, 422).

    `locs[i]` names record i in that path (its index or line; None: a single record, no index)."""
    locs = locs if locs is not None else list(range(len(records)))
    heavy = [take_numeric_lists(r, loc, prefix) for r, loc in zip(records, locs)]
    try:
        rows = validate_records(table, records)
    except RecordError as exc:
        raise BadInput(exc.message, field=_path(prefix, locs[exc.index], *split_field(exc.field)), status=422,
                       kind="schema") from None
    finally:
        for r, h in zip(records, heavy):  # the caller's records stay whole
            r.update(h)
    for row, h in zip(rows, heavy):
        row.payload.update(h)
    return rows


def arrow_table(payloads: list[dict], table: str = "trajectories") -> pa.Table:
    """Payload dicts -> the table's payload schema, column by column (~10x faster than Table.from_pylist for
    long token lists)."""
    schema = payload_schema(table)
    return pa.table([pa.array([p.get(f.name) for p in payloads], type=f.type) for f in schema], schema=schema)


def append_records(writer, records: list[dict], table: str = "trajectories", *, locs=None):
    """Validate all (BadInput on the first bad one, its field path starting with its `locs` entry; nothing
    written), then one append. -> AppendResult."""
    rows = validated_rows(records, table, locs=locs, prefix=())
    return writer.submit_arrow(table, arrow_table([r.payload for r in rows], table),
                               event_type=pa.array([r.event_type for r in rows], pa.string()),
                               occurred_at=pa.array([r.occurred_at for r in rows],
                                                    pa.timestamp("us", tz="UTC"))).result()
