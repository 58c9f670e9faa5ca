"""Automatic compaction: a lake fed by streaming ingest (a small file per group commit) is compacted in the
background, partition by partition, when a day gathers too many small files or too many small bytes; a day
that is no longer the newest (streaming has moved on) as soon as it has two small files.

Why it is safe beside writers and consumers: compaction is delta-rs `optimize.compact` on one day partition;
it takes no lock a writer takes (appends are blind and never conflict with it; delta-rs retries a commit
that raced one), it commits its files with dataChange=false, which the change feed skips, so a consumer
reading versions (N, M] sees each row once, and it deletes nothing (the replaced files stay until `vacuum`,
which keeps whatever a registered consumer has not read). A compaction that loses a race to another
compaction (two compactors on one partition) fails its commit and is tried again at the next pass.

    compactor = AutoCompactor(lake.table_set).start()   # a daemon thread, one pass every interval_s
    ...
    compactor.stop()                                     # waits for a running pass; re-raises its error
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from deltalake.exceptions import CommitFailedError

from ground.options import helped
from lake.maintenance import compact, vacuum
from lake.tables import TableSet

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True)
class CompactThresholds:
    small_file_bytes: int = field(default=16 * MIB, **helped("a file smaller than this is small"))
    min_small_files: int = field(default=8, **helped("compact a day with at least this many small files"))
    min_small_bytes: int = field(default=64 * MIB, **helped(
        "or whose small files add up to at least this many bytes"))
    closed_min_small_files: int = field(default=2, **helped(
        "a day before the table's newest day (no longer streamed into) is compacted from this many"))
    target_size: int = field(default=128 * MIB, **helped("size of the files compaction writes"))
    interval_s: float = field(default=10.0, **helped("seconds between two passes of the thread"))
    vacuum_interval_s: float | None = field(default=3600.0, **helped(
        "seconds between vacuums (default retention, consumer-aware); None: never"))

    def __post_init__(self):
        if self.small_file_bytes <= 0 or self.min_small_bytes <= 0 or min(self.min_small_files,
                                                                           self.closed_min_small_files) < 2:
            raise ValueError("compaction thresholds: sizes must be > 0 and file counts >= 2")
        if self.target_size < self.small_file_bytes:
            raise ValueError("compaction target_size must be at least small_file_bytes")
        if self.interval_s < 0 or (self.vacuum_interval_s is not None and self.vacuum_interval_s <= 0):
            raise ValueError("compaction intervals must be >= 0 (vacuum: > 0 or None)")


class AutoCompactor:
    """Compacts the day partitions of `tables` (default: all) that cross `thresholds`; see the module doc."""

    def __init__(self, table_set: TableSet, thresholds: CompactThresholds | None = None,
                 tables: list[str] | None = None, fsync: bool = True):
        self.table_set = table_set
        self.thresholds = thresholds or CompactThresholds()
        self.tables = tables
        self.fsync = fsync
        self.passes = 0
        self.compactions: list[dict[str, Any]] = []  # every compaction run, in order
        self.lost_races = 0  # commits refused because another compactor changed the partition first
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def due(self) -> dict[str, list[str]]:
        """{table: days} whose small files cross a threshold now."""
        t = self.thresholds
        out: dict[str, list[str]] = {}
        for table in self.tables or self.table_set.tables():
            days = self.table_set.partition_files(table)
            for day, sizes in sorted(days.items()):
                small = [s for s in sizes if s < t.small_file_bytes]
                least = t.min_small_files if day == max(days) else t.closed_min_small_files
                if len(small) >= least or (len(small) >= 2 and sum(small) >= t.min_small_bytes):
                    out.setdefault(table, []).append(day)
        return out

    def maybe_compact(self) -> list[dict[str, Any]]:
        """One pass: compact every partition that is due; returns what each compaction did."""
        done = []
        for table, days in self.due().items():
            for day in days:
                try:
                    res = compact(self.table_set, table, day, self.thresholds.target_size, fsync=self.fsync)
                except CommitFailedError as exc:  # a concurrent compaction of the same files won the commit
                    self.lost_races += 1
                    log.info("compaction of %s day=%s lost a race, retried next pass: %s", table, day, exc)
                    continue
                done.append({**res, "day": day})
        self.passes += 1
        self.compactions += done
        return done

    def vacuum(self) -> list[dict[str, Any]]:
        """Delete replaced files past the default retention that no registered consumer still needs."""
        return [vacuum(self.table_set, t) for t in self.tables or self.table_set.tables()]

    # -- the background thread ------------------------------------------------------------------------
    def start(self) -> "AutoCompactor":
        if self._thread is not None:
            raise RuntimeError("this AutoCompactor is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lake-autocompact")
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop after the current pass; re-raises an error that ended the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        interval, vacuum_every = self.thresholds.interval_s, self.thresholds.vacuum_interval_s
        last_vacuum = time.monotonic()
        try:
            while not self._stop.is_set():
                self.maybe_compact()
                if vacuum_every is not None and time.monotonic() - last_vacuum >= vacuum_every:
                    last_vacuum = time.monotonic()
                    self.vacuum()
                self._stop.wait(interval)
        except BaseException as exc:  # kept for stop() to re-raise: a dead compactor must not go unnoticed
            self._error = exc
            log.error("automatic compaction stopped: %s", exc)

    def __enter__(self) -> "AutoCompactor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
