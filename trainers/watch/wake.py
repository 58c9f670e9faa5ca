"""Waking the streaming trainer when a followed table commits: a watchdog observer on each table's `_delta_log`
folder (a commit is a new JSON file there), and a poll every `interval` seconds as the fallback (a lake on object
storage has no folder to watch; a file event may be missed on network file systems).

Only events that write the folder wake it (COMMIT_EVENTS): watchdog also reports a file opened or closed without a
write, and the watcher reads those very log files whenever it looks for new rows (`lake.version`, the change feed),
so counting reads woke it again after every look: an idle watcher with rows waiting (unrewarded trajectories) spun
at 0.2-0.4 of a core, one view query per debounce.
"""
from __future__ import annotations

import threading
from pathlib import Path

from watchdog.events import (EVENT_TYPE_CLOSED, EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED,
                             FileSystemEvent, FileSystemEventHandler)
from watchdog.observers import Observer

# what a commit does to the log folder (a new file written, or a temporary file renamed into place); not opened /
# closed_no_write (reads: our own included), attrib or deleted (log clean-up is no new data)
COMMIT_EVENTS = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED})


class _Commits(FileSystemEventHandler):
    def __init__(self, event: threading.Event):
        self.event = event

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not event.is_directory and event.event_type in COMMIT_EVENTS:
            self.event.set()


class Waker:
    """`wait()` returns when a followed table's log changed, `interval` passed, or `stop()` was called."""

    def __init__(self, log_dirs: list[Path], interval: float):
        self.interval = interval
        self.event = threading.Event()
        self.stopped = False
        self.observer = None
        local = [d for d in log_dirs if d.is_dir()]
        if local:
            self.observer = Observer()
            for d in local:
                self.observer.schedule(_Commits(self.event), str(d), recursive=False)
            self.observer.daemon = True
            self.observer.start()

    @property
    def watching(self) -> bool:
        return self.observer is not None

    def wait(self, timeout: float | None = None) -> bool:
        """True when woken by a file event (or stop), False on the poll timeout."""
        fired = self.event.wait(self.interval if timeout is None else timeout)
        self.event.clear()
        return fired

    def stop(self) -> None:
        self.stopped = True
        self.event.set()
        if self.observer is not None:
            self.observer.stop()
