"""Compaction, consumer-aware vacuum and history.

Compactions of one table are serialised across processes by an flock on `<lock dir>/compact-<table>` (the
lake's `_lachesis/locks`, or a local directory per object-store root: lake/store.py), and each loads the table only once it holds the lock. Measured with delta-rs 1.6.6: two `optimize.compact`
calls whose tables were loaded at the same version both commit (no conflict is raised), and the rows of the
partition are then in the table twice. Writers never take this lock. The kernel drops an flock when its
process dies, so a killed compactor leaves nothing stale. On object storage the lock covers one machine:
run compaction from one place (docs/scale-out.md).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import unquote

from lake import delta, store
from lake.tables import TableSet

DEFAULT_RETENTION_HOURS = 168  # Delta's default: readers pinned to a week-old snapshot keep working


def compact(tables: TableSet, table: str, day: str | None = None, target_size: int | None = None, *,
            fsync: bool = True) -> dict[str, Any]:
    """Merge small files per day partition (dataChange=false: consumers never see compaction as new data).

    delta-rs commits the merged files without fsync; with `fsync` they, the log entry and their directories
    are synced right after, so the window in which a power loss could keep the log entry but lose the data
    is the commit itself (the replaced files stay on disk until a vacuum, days later)."""
    with compaction_lock(tables, table):
        dt = tables.delta_table(table)  # loaded under the lock: never a version another compaction replaced
        filters = [("day", "=", day)] if day else None
        metrics = dt.optimize.compact(partition_filters=filters, target_size=target_size,
                                      writer_properties=delta.compact_properties(table))
    added = metrics.get("numFilesAdded", 0)
    if fsync and added:
        path = tables.table_path(table)
        delta.sync_commit(path, dt.version(), [f for f, _ in delta.added_files(path, dt.version(), False)])
    return {"table": table, "version": dt.version(), "files_added": added,
            "files_removed": metrics.get("numFilesRemoved", 0)}


@contextmanager
def compaction_lock(tables: TableSet, table: str) -> Iterator[None]:
    """Hold the table's compaction lock (blocking) for the duration of the block."""
    path = tables.store.lock_dir() / f"compact-{table}"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def protected_files(tables: TableSet, table: str) -> set[str]:
    """Files that registered consumers still have to read: new-data adds after the slowest one's offset."""
    offsets = [o[table] for o in tables.consumers().values() if table in o]
    if not offsets:
        return set()
    path = tables.table_path(table)
    keep = set()
    for version in range(min(offsets) + 1, tables.version(table) + 1):
        for file, _ in delta.added_files(path, version):
            keep.add(_normal(file))
    return keep


def vacuum(tables: TableSet, table: str, retention_hours: int = DEFAULT_RETENTION_HOURS,
           dry_run: bool = False) -> dict[str, Any]:
    """Delete files no longer in the table and older than the retention, except files a consumer still needs.
    `kept_for_retention` counts the replaced files still younger than the retention: a vacuum that deletes
    nothing says why (87 files kept by the 168 h default read as a vacuum that did not work)."""
    dt = tables.delta_table(table)
    candidates = dt.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False)
    replaced = dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
    root = tables.table_path(table)
    keep = protected_files(tables, table)
    deleted, kept = [], []
    for rel in candidates:
        full = _normal(store.join(root, unquote(rel)))
        if not store.exists(full):  # deleted by an earlier vacuum; Delta still lists its tombstone
            continue
        if full in keep:
            kept.append(rel)
            continue
        if not dry_run:
            store.delete_file(full)
        deleted.append(rel)
    old = set(candidates)
    young = [rel for rel in replaced if rel not in old and store.exists(_normal(store.join(root, unquote(rel))))]
    return {"table": table, "deleted": len(deleted), "kept_for_consumers": len(kept),
            "kept_for_retention": len(young), "retention_hours": retention_hours, "dry_run": dry_run,
            "files": deleted}


def _normal(location) -> str:
    """One spelling per file: a normalised local path, or the URI as the log names it."""
    return str(location) if store.is_url(location) else os.path.normpath(str(location))


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
