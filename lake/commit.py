"""Group commit: concurrent callers' small batches become one Delta version.

One committer thread per table drains everything queued while the previous commit ran and commits it as a
single version. Each caller's future resolves only after its rows are committed (or with the commit's error).
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa


@dataclass
class Batch:
    payload: pa.Table  # complete payload columns; the committer adds the envelope for the whole group at once
    event_types: pa.Array
    occurred_at: pa.Array
    writer_id: str
    seq: int | None  # None: the writer assigns the next sequence at commit time
    future: Future
    skipped: int = 0  # rows the table's CommitGuard dropped (their key was in the lake already)


@dataclass(frozen=True)
class AppendResult:
    table: str
    version: int | None  # None for a duplicate that wrote nothing
    rows: int
    duplicate: bool = False
    seq: int | None = None
    skipped: int = 0  # rows left out at commit time: their key was already in the lake (lake.locks.CommitGuard)


CommitFn = Callable[[list[Batch]], None]


class GroupCommitter:
    """Serialises commits of one table in this process, merging whatever queued up meanwhile."""

    def __init__(self, commit: CommitFn, max_rows: int = 200_000, linger_s: float = 0.002):
        self._commit = commit
        self._max_rows = max_rows
        # A short wait for company: a commit costs tens of ms, so 2 ms more gathers callers arriving together.
        self._linger_s = linger_s
        self._queue: queue.Queue[Batch] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lake-group-commit")
        self._thread.start()

    def submit(self, batch: Batch) -> Future:
        self._queue.put(batch)
        return batch.future

    def _run(self) -> None:
        while True:
            group = [self._queue.get()]
            rows = group[0].payload.num_rows
            while rows < self._max_rows:
                try:
                    nxt = self._queue.get(timeout=self._linger_s)
                except queue.Empty:
                    break
                group.append(nxt)
                rows += nxt.payload.num_rows
            try:
                self._commit(group)
            except BaseException as exc:  # every waiter must hear about the failure
                for b in group:
                    if not b.future.done():
                        b.future.set_exception(exc)
