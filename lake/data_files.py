"""A commit's data files: one Parquet file per day partition, written in parallel, fsynced, described as
Delta `add` actions (with the stats delta-rs would write), ready to be committed in one version.

Why not `write_deltalake`: its split of rows into day partitions costs much of a bulk append, and after
Parquet encoding the split is the largest cost of a bulk write (bench/bench_lake.py; the profile is in
docs/lake-design.md, "Figures behind the code"). So the split is a filter of each column by a day mask, run
by the thread that then writes that day (pyarrow
releases the GIL: both cores encode), the content hash is computed in the same thread (`prepare`), and a
batch that is all one day, the streaming case, is never copied at all. Files are fsynced before they are
committed, which delta-rs does not do (ground/durable.py). On object storage (lake/store.py) the files go
through the root's pyarrow S3 filesystem and a finished upload is durable, so there is nothing to sync.
"""
from __future__ import annotations

import datetime as dt
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from ground.durable import fsync_all, parents_up_to
from lake import store
from lake.store import Location

PARTITION = "day"
ROW_GROUP_ROWS = 128 * 1024  # DuckDB reads row groups in parallel; one 1M-row group would use one core
# Columns unique per row: dictionary encoding is tried and abandoned on every page, a cost on every bulk write
# (docs/lake-design.md), and they compress no better with it.
UNIQUE_COLUMNS = ("event_id", "content_hash")
# zstd level of the hot path: level 1 is Arrow's default and the cheapest positive level; compaction
# rewrites the files at COMPACT_LEVEL, so the lake's long-lived files are the smaller ones.
ZSTD_LEVEL = 1
STATS_STRING_LIMIT = 64  # longer min/max strings are left out of the log's stats (allowed: no skipping)


def plain_columns(schema: pa.Schema) -> list[str]:
    """Top-level columns written without a dictionary: the unique ones and floating point ones. DuckDB scans
    a dictionary-encoded double column (pyarrow's and delta-rs's default, abandoned after 1 MB of dictionary)
    markedly slower than a plain one (docs/lake-design.md, "Figures behind the code")."""
    return [f.name for f in schema if f.name in UNIQUE_COLUMNS or pa.types.is_floating(f.type)]


@dataclass(frozen=True)
class WrittenFile:
    path: Path | str  # absolute: a local Path, or an object-store URI
    action: AddAction


def _partitions(data: pa.Table) -> list[tuple[str, pa.Table | tuple[pa.Table, pa.Array]]]:
    """(day, rows of that day without the day column); zero-copy when every row has the same day, else the
    rows and a mask of that day, for the writing thread to filter out."""
    rest = data.drop_columns([PARTITION])
    encoded = pc.dictionary_encode(data.column(PARTITION)).combine_chunks()
    values = encoded.dictionary.to_pylist()
    if len(values) == 1:
        return [(values[0], rest)]
    # A filter per day and column (_filter), not one sort and take: on 1M rows in 8 days (CPU s, warm) a
    # sort and `Table.take` cost 1.8, `Table.filter` 0.93, a filter of each column 0.65-0.8.
    return [(value, (rest, pc.equal(encoded.indices, k))) for k, value in enumerate(values)]


def _filter(table: pa.Table, mask: pa.Array) -> pa.Table:
    return pa.Table.from_arrays([c.filter(mask) for c in table.columns], schema=table.schema)


Prepare = Callable[[pa.Table], pa.Table]


def write_partitioned(table_dir: Location, data: pa.Table, *, prepare: Prepare | None = None, fsync: bool = True,
                      workers: int | None = None) -> list[WrittenFile]:
    """Write `data` under `table_dir/day=<d>/` as one file per day; with `fsync` the files and their directories
    (up to `table_dir`) are synced before this returns.

    `prepare` maps a partition's rows (without `day`) to what is written, in the partition's own thread: the
    lake adds the content hash there, so hashing one day overlaps with encoding another.
    """
    parts = _partitions(data)
    remote = store.is_url(table_dir)
    fs = store.filesystem_for(table_dir)
    fsync = fsync and not remote
    workers = max(1, min(len(parts), workers or os.cpu_count() or 1))

    def write(part: tuple[str, pa.Table | tuple[pa.Table, pa.Array]]) -> WrittenFile:
        day, rows = part
        if isinstance(rows, tuple):  # several days: this thread copies out its own partition's rows
            rows = _filter(*rows)
        if prepare is not None:
            rows = prepare(rows)
        rel = f"{PARTITION}={day}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
        path = store.join(table_dir, rel)
        if not remote:
            path.parent.mkdir(parents=True, exist_ok=True)
        collector: list[pq.FileMetaData] = []
        pq.write_table(rows, store.to_fs_path(path), filesystem=fs, metadata_collector=collector,
                       **parquet_options(rows.schema))
        size = fs.get_file_info(store.to_fs_path(path)).size
        action = AddAction(rel, size, {PARTITION: day}, int(time.time() * 1000), True,  # dataChange: new rows
                           file_stats(collector[0], rows.schema))
        return WrittenFile(path, action)

    if workers == 1:
        written = [write(p) for p in parts]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="lake-write") as pool:
            written = list(pool.map(write, parts))
    if fsync:  # the files and every directory entry leading to them, before anything can point at them
        paths = [w.path for w in written]
        fsync_all(paths + parents_up_to(paths, table_dir))
    return written


def parquet_options(schema: pa.Schema, level: int = ZSTD_LEVEL) -> dict:
    plain = set(plain_columns(schema))
    return {
        "compression": "zstd",
        "compression_level": level,
        "row_group_size": ROW_GROUP_ROWS,
        "use_dictionary": [c for c in schema.names if c not in plain],
    }


def file_stats(meta: pq.FileMetaData, schema: pa.Schema) -> str:
    """Delta `stats` JSON for one file from its Parquet footer: numRecords, and nullCount / minValues /
    maxValues of top-level primitive columns (the ones delta-rs reports). Timestamps are milliseconds, min
    rounded down and max up, so file skipping never drops a matching row."""
    nulls: dict[str, int] = {}
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    leaf = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    for field in schema:
        i = leaf.get(field.name)
        if i is None:  # nested column: its leaves have dotted paths
            continue
        stats = [meta.row_group(g).column(i).statistics for g in range(meta.num_row_groups)]
        if not stats or any(s is None or not s.has_null_count for s in stats):
            continue
        nulls[field.name] = int(sum(s.null_count for s in stats))
        ranged = [s for s in stats if s.has_min_max]
        if not ranged or any(not s.has_min_max and s.num_values > 0 for s in stats):  # num_values: non-null
            continue
        lo, hi = min(s.min for s in ranged), max(s.max for s in ranged)
        lo, hi = _stat_value(field.type, lo, up=False), _stat_value(field.type, hi, up=True)
        if lo is not None and hi is not None:
            mins[field.name], maxs[field.name] = lo, hi
    return orjson.dumps({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs,
                         "nullCount": nulls}).decode()


def _stat_value(typ: pa.DataType, value, *, up: bool):
    if pa.types.is_timestamp(typ):
        if isinstance(value, dt.datetime):
            us = value.replace(tzinfo=value.tzinfo or dt.timezone.utc).timestamp() * 1_000_000
            ms = math.ceil(round(us) / 1000) if up else math.floor(round(us) / 1000)
            stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
            return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
        return None
    if pa.types.is_string(typ):
        return value if isinstance(value, str) and len(value) <= STATS_STRING_LIMIT else None
    if pa.types.is_floating(typ):
        return None if value is None or math.isnan(value) or math.isinf(value) else float(value)
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return value
    return None
