"""Compaction, consumer-aware vacuum and history."""
from __future__ import annotations

import datetime as dt
import os
from typing import Any
from urllib.parse import unquote

from lake import delta
from lake.tables import TableSet

DEFAULT_RETENTION_HOURS = 168  # Delta's default: readers pinned to a week-old snapshot keep working


def compact(tables: TableSet, table: str, day: str | None = None, target_size: int | None = None) -> dict[str, Any]:
    """Merge small files per day partition (dataChange=false: consumers never see compaction as new data)."""
    dt = tables.delta_table(table)
    filters = [("day", "=", day)] if day else None
    metrics = dt.optimize.compact(partition_filters=filters, target_size=target_size,
                                  writer_properties=delta.compact_properties(table))
    return {"table": table, "version": dt.version(), "files_added": metrics.get("numFilesAdded", 0),
            "files_removed": metrics.get("numFilesRemoved", 0)}


def protected_files(tables: TableSet, table: str) -> set[str]:
    """Files that registered consumers still have to read: new-data adds after the slowest one's offset."""
    offsets = [o[table] for o in tables.consumers().values() if table in o]
    if not offsets:
        return set()
    path = tables.table_path(table)
    keep = set()
    for version in range(min(offsets) + 1, tables.version(table) + 1):
        for file, _ in delta.added_files(path, version):
            keep.add(os.path.normpath(file))
    return keep


def vacuum(tables: TableSet, table: str, retention_hours: int = DEFAULT_RETENTION_HOURS,
           dry_run: bool = False) -> dict[str, Any]:
    """Delete files no longer in the table and older than the retention, except files a consumer still needs."""
    dt = tables.delta_table(table)
    candidates = dt.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False)
    root = tables.table_path(table)
    keep = protected_files(tables, table)
    deleted, kept = [], []
    for rel in candidates:
        full = os.path.normpath(str(root / unquote(rel)))
        if not os.path.exists(full):  # deleted by an earlier vacuum; Delta still lists its tombstone
            continue
        if full in keep:
            kept.append(rel)
            continue
        if not dry_run:
            os.unlink(full)
        deleted.append(rel)
    return {"table": table, "deleted": len(deleted), "kept_for_consumers": len(kept), "dry_run": dry_run,
            "files": deleted}


def history(tables: TableSet, table: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    for h in tables.delta_table(table).history(limit):
        metrics = h.get("operationMetrics") or {}
        rows.append({
            "table": table,
            "version": h.get("version"),
            "timestamp": _iso(h.get("timestamp")),
            "operation": h.get("operation"),
            "rows_added": metrics.get("num_added_rows", metrics.get("numOutputRows")),
            "files_added": metrics.get("num_added_files", metrics.get("numFilesAdded")),
            "files_removed": metrics.get("num_removed_files", metrics.get("numFilesRemoved")),
        })
    return rows


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="seconds")
