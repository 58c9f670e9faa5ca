"""fsync of files and directories: what makes a commit survive a power loss, not only a killed process.

delta-rs writes through object_store's LocalFileSystem, which renames a temp file into place but does not
fsync (fsync there is opt-in, `LocalFileSystem::with_fsync`, apache/arrow-rs-object-store#643, and delta-rs
1.6 does not turn it on; an strace of `write_deltalake` shows no fsync or fdatasync). So the lake syncs
itself: the data files of a commit before the commit (a log entry must never point at data that can still
be lost) with the directories that gained their entries, then the log entry and its directory, before the
caller is acknowledged.
Every sync goes through `fsync_fd`, the one place that calls `os.fsync`.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

MAX_SYNC_THREADS = 8


def fsync_fd(fd: int) -> None:
    os.fsync(fd)


def fsync_path(path: str | os.PathLike) -> None:
    """fsync one file or directory by path (a read-only descriptor is enough on Linux and macOS)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0)
    fd = os.open(path, flags)
    try:
        fsync_fd(fd)
    finally:
        os.close(fd)


def fsync_all(paths: Iterable[str | os.PathLike]) -> None:
    """fsync each path once, files and directories alike, all at once from a few threads: on ext4 each fsync
    waits for a journal commit (2.5-4.5 ms here, a directory as much as a file), and fsyncs waiting
    together share one."""
    unique = list(dict.fromkeys(os.path.normpath(str(p)) for p in paths))
    if len(unique) <= 1:
        for p in unique:
            fsync_path(p)
        return
    list(_pool().map(fsync_path, unique))  # list(): re-raises the first error


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One pool for the process: a server syncs twice per commit, and starting the threads anew each time
    showed in its profile (docs/ingest-profile.md)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(MAX_SYNC_THREADS, thread_name_prefix="lake-fsync")
        return _POOL


def _forget_pool() -> None:
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()  # a forked child has none of the parent's threads


os.register_at_fork(after_in_child=_forget_pool)


def parents_up_to(files: Iterable[str | os.PathLike], root: str | os.PathLike) -> list[Path]:
    """The directories between each file and `root` (inclusive), deepest first: a new partition directory's
    own entry lives in its parent, so the whole chain up to the table directory is synced."""
    root = Path(root)
    out: list[Path] = []
    for f in files:
        d = Path(f).parent
        while True:
            if d not in out:
                out.append(d)
            if d == root or d == d.parent:
                break
            d = d.parent
    return out
