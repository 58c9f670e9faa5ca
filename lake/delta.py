"""Thin helpers over delta-rs: table creation, guarded appends, commit log reading.

A table's location is a local Path or an object-store URI (lake/store.py); the log is read through the
store's pyarrow filesystem, never with open(), and fsync applies to local tables only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote

import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake

from ground.durable import fsync_all, parents_up_to
from lake.data_files import ROW_GROUP_ROWS, Prepare, plain_columns, write_partitioned
from lake import store
from lake.schemas import table_schema
from lake.store import Location

# write_deltalake defaults to snappy (2x the disk of zstd, measured in lake-design.md). Compaction writes
# the long-lived files, so it takes a higher level than the hot path's (lake.data_files.ZSTD_LEVEL).
COMPACT_LEVEL = 3
ZSTD = WriterProperties(compression="ZSTD")


def compact_properties(table: str) -> WriterProperties:
    """zstd at COMPACT_LEVEL, and the lake writer's plain (dictionary-free) columns (lake.data_files)."""
    plain = ColumnProperties(dictionary_enabled=False)
    return WriterProperties(compression="ZSTD", compression_level=COMPACT_LEVEL, max_row_group_size=ROW_GROUP_ROWS,
                            column_properties={c: plain for c in plain_columns(table_schema(table))})


# delta-rs replays every JSON commit since the last checkpoint on each commit and each update_incremental:
# 3 ms of CPU right after a checkpoint, 30 ms a commit 100 commits later (the default interval). A server
# commits many small versions, so a checkpoint every 10 keeps a commit at ~35 ms instead of ~50 on average
# (docs/ingest-profile.md); readers replay fewer commits too.
CHECKPOINT_INTERVAL = 10


def create_table(path: Location, table: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    return DeltaTable.create(str(path), table_schema(table), mode="ignore", partition_by=["day"], name=table,
                             configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)},
                             storage_options=storage_options)


def append(dt: DeltaTable, table_dir: Location, data: pa.Table, transactions: dict[str, int], *,
           prepare: Prepare | None = None, fsync: bool = True) -> int:
    """Append `data` as one Delta version that also records each writer's batch sequence; returns the version.

    The files are written by lake.data_files (one per day) and committed with their add actions; with `fsync`
    the files and their directories are synced before the commit, the log entry and `_delta_log` after it,
    so a returned version survives a power loss. A column the table's Delta schema lacks (a schema that
    evolved) goes through `write_deltalake(schema_mode="merge")` once, which also updates the table schema;
    so does an empty batch (a commit of app transactions only). `prepare` completes rows before they are
    written (lake.data_files.write_partitioned: per partition, in the writing threads).
    """
    props = CommitProperties(app_transactions=[Transaction(app, seq) for app, seq in transactions.items()])
    fsync = fsync and not store.is_url(table_dir)  # object storage: a PUT is durable when it returns
    before = dt.version()
    columns = (prepare(data.slice(0, 0)) if prepare else data).column_names
    if data.num_rows == 0 or set(columns) - {f.name for f in dt.schema().fields}:
        data = prepare(data) if prepare else data
        write_deltalake(dt, data, mode="append", partition_by=["day"], schema_mode="merge",
                        writer_properties=ZSTD, commit_properties=props)
        version = dt.version()  # write_deltalake advanced `dt` to the version it committed
        if fsync:
            sync_commit(table_dir, version, [f for f, _ in added_files(table_dir, version)])
        return version
    written = write_partitioned(table_dir, data, prepare=prepare, fsync=fsync)
    dt.create_write_transaction([w.action for w in written], mode="append", schema=dt.schema(),
                                partition_by=["day"], commit_properties=props)
    # `dt` stays at `before`: the caller advances it before its next commit anyway (one log replay a commit,
    # not two; docs/ingest-profile.md), and the version is the first after `before` that adds our file
    version = _version_adding(table_dir, written[0].action.path, before + 1)
    if fsync:
        sync_commit(table_dir, version)  # the data files were synced before the commit
    return version


def sync_commit(table_dir: Location, version: int, files: list[str | Path] = ()) -> None:
    """fsync a commit: `files` (data it added that is not synced yet) and their directories, then the log
    entry and `_delta_log`; data first, so a durable log entry never points at data that is not. Nothing to
    do on object storage."""
    if store.is_url(table_dir):
        return
    table_dir = Path(table_dir)
    files = [Path(f) for f in files]
    if files:
        fsync_all(files + parents_up_to(files, table_dir))
    log = table_dir / "_delta_log" / f"{version:020d}.json"
    fsync_all([log, log.parent])


def _version_adding(table_dir: Location, rel_path: str, first: int) -> int:
    """The version from `first` on whose commit adds `rel_path` (a compaction may have committed before it)."""
    version = first
    while True:
        try:
            actions = commit_actions(table_dir, version)
        except FileNotFoundError:
            raise RuntimeError(f"committed file {rel_path} is in no version {first}..{version - 1} of "
                               f"{table_dir}") from None
        if any((a.get("add") or {}).get("path") == rel_path for a in actions):
            return version
        version += 1


def commit_actions(path: Location, version: int) -> list[dict]:
    """The actions of one commit, read from `_delta_log/<version>.json` through the table's filesystem."""
    data = store.read_bytes(store.join(path, "_delta_log", f"{version:020d}.json"))
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def added_files(path: Location, version: int, new_data_only: bool = True) -> list[tuple[str, dict[str, str]]]:
    """Files a commit adds: by default only new data, `add` actions with dataChange=true (compaction adds are
    dataChange=false); every add with `new_data_only=False`."""
    out = []
    for action in commit_actions(path, version):
        add = action.get("add")
        if add and (add.get("dataChange", True) or not new_data_only):
            out.append((str(store.join(path, unquote(add["path"]))), add.get("partitionValues") or {}))
    return out
