"""When a watched file is ready to act on: the file-settling the skills mirror and the inbox share.

A file is acted on only once its signature (size, mtime, inode, ctime, mode: `file_sig`, of the entry itself,
never a symbolic link's target) has held still for `settle` seconds (`Stability`), so half-written files
wait; editor temp files and dot-files are never acted on (`is_temp`). A file that failed for a reason that
may pass waits longer each time (`Backoff`), while the others proceed.
"""
from __future__ import annotations

import time
from pathlib import Path

TEMP_SUFFIXES = ("~", ".tmp", ".temp", ".part", ".partial", ".swp", ".swx", ".swo", ".crdownload", ".lock",
                 ".download")


def is_temp(name: str) -> bool:
    """An editor temp file, a partial download or a dot-file: never a watched file."""
    n = name.lower()
    return (n.startswith((".", "#", "~")) or n.endswith(TEMP_SUFFIXES) or n == "4913" or ".tmp" in n
            or n.startswith(".~lock"))


def file_sig(p: Path):
    """The file's signature (None when it is gone): a change in any part means it is being written."""
    try:
        st = p.lstat()  # a symbolic link's own signature: the watcher never follows one
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)


class Stability:
    """Tracks file signatures; `stable(p)` is the signature once it held still for `settle` seconds, else None
    (and `waiting` is set, so the loop looks again soon)."""

    def __init__(self, settle: float):
        self.settle = settle
        self.first: dict[str, tuple] = {}
        self.waiting = False

    def stable(self, p: Path):
        sig = file_sig(p)
        if sig is None:
            self.first.pop(str(p), None)
            return None
        now = time.monotonic()
        prev = self.first.get(str(p))
        if prev is None or prev[0] != sig:
            self.first[str(p)] = (sig, now)
            if self.settle > 0:
                self.waiting = True
                return None
            return sig
        if now - prev[1] >= self.settle:
            return sig
        self.waiting = True
        return None

    def forget(self, p: Path) -> None:
        """The file moved away: its next sighting starts over."""
        self.first.pop(str(p), None)


class Backoff:
    """Retry times of files that failed for a reason that may pass (an I/O or lake error): the next pass, then
    after 1, 2, 4 ... 300 s; a changed file is tried at once. A failing file costs next to nothing while the
    others proceed."""

    def __init__(self, cap_s: float = 300.0):
        self.cap_s = cap_s
        self.state: dict[str, tuple] = {}  # key -> (sig, failures, not before)

    def ready(self, key: str, sig) -> bool:
        st = self.state.get(key)
        return st is None or st[0] != sig or time.monotonic() >= st[2]

    def failed(self, key: str, sig) -> int:
        """Count a failure; -> how many in a row (the caller logs the first and each power of two)."""
        prev = self.state.get(key)
        n = prev[1] + 1 if prev is not None and prev[0] == sig else 1
        self.state[key] = (sig, n, time.monotonic() + min(self.cap_s, 2.0 ** (n - 2)) if n > 1 else 0.0)
        return n

    def ok(self, key: str) -> None:
        self.state.pop(key, None)
