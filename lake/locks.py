"""Commits across processes: one lock per table, and the guard a writer may put on a table's commits.

Two processes that append to one table (two `lake serve`, `lake watch` beside `lake import`) each check ids
against what they know and then commit; without a lock both pass the check and the same trajectory is stored
twice. Every commit of a table therefore runs under an exclusive `flock` on
`<root>/_lachesis/locks/<table>.lock`, and a table's `CommitGuard` (when a writer registered one, e.g. ingest's
id index) looks at the latest version and drops the rows whose key is already in the lake, under that lock:
dedupe is a property of the commit. The kernel releases a flock when its holder dies, so a crash (kill -9
included) can never leave the lake locked.
"""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

import pyarrow as pa
from deltalake import DeltaTable

from lake.tables import MARKER


class CommitGuard(Protocol):
    """Decides, at commit time and under the table's lock, which rows are new."""

    def admit(self, dt: DeltaTable, payloads: list[pa.Table]) -> list[pa.Array | None]:
        """`dt` is at the table's latest version; -> per payload a boolean mask of the rows to commit (None:
        all of them)."""

    def committed(self, version: int, payloads: list[pa.Table]) -> None:
        """The admitted rows (payloads already filtered) are in `version`."""


class TableLocks:
    """The commit locks of one lake (a lock file per table, opened once, kept open)."""

    def __init__(self, root: Path, directory: Path | None = None):
        # `directory`: where an object-store lake keeps its lock files (lake.store.Store.lock_dir)
        self.dir = Path(directory) if directory else Path(root) / MARKER / "locks"
        self._fds: dict[str, int] = {}
        self._mutex = threading.Lock()

    def _fd(self, table: str) -> int:
        with self._mutex:
            if table not in self._fds:
                self.dir.mkdir(parents=True, exist_ok=True)
                self._fds[table] = os.open(self.dir / f"{table}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            return self._fds[table]

    @contextmanager
    def hold(self, table: str) -> Iterator[None]:
        """Exclusive across processes (and across Lake objects of one process: each opens its own file)."""
        fd = self._fd(table)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
