"""Thin helpers over delta-rs: table creation, guarded appends, commit log reading."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake

from lake.schemas import table_schema

# write_deltalake defaults to snappy (2x the disk of zstd, measured in lake-design.md).
ZSTD = WriterProperties(compression="ZSTD")


def create_table(path: Path, table: str) -> DeltaTable:
    return DeltaTable.create(str(path), table_schema(table), mode="ignore", partition_by=["day"], name=table)


def append(dt: DeltaTable, data: pa.Table, transactions: dict[str, int]) -> int:
    """Append `data` as one Delta version that also records each writer's batch sequence; returns the version."""
    props = CommitProperties(app_transactions=[Transaction(app, seq) for app, seq in transactions.items()])
    write_deltalake(dt, data, mode="append", partition_by=["day"], schema_mode="merge",
                    writer_properties=ZSTD, commit_properties=props)
    return dt.version()  # write_deltalake advanced `dt` to the version it committed


def commit_actions(path: Path, version: int) -> list[dict]:
    """The actions of one commit, read from `_delta_log/<version>.json`."""
    log = path / "_delta_log" / f"{version:020d}.json"
    with open(log, "rb") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def added_files(path: Path, version: int) -> list[tuple[str, dict[str, str]]]:
    """New-data files of a commit: `add` actions with dataChange=true (compaction adds are dataChange=false)."""
    out = []
    for action in commit_actions(path, version):
        add = action.get("add")
        if add and add.get("dataChange", True):
            out.append((str(path / unquote(add["path"])), add.get("partitionValues") or {}))
    return out
