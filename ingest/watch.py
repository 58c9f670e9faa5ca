"""`lake watch`: a skills folder -> `skills`/`skill_usage` events, an inbox folder -> trajectories.

The watcher is the loop over its two parts: the skills mirror (skills_mirror.py) and the inbox (inbox.py), which
share the file-settling (settling.py: a file is acted on only once its size and mtime have been stable for
`settle` seconds, so half-written files wait; editor temp files and dot-files are ignored) and the journal
(watch_journal.py: one lake writer, the counters, each error recorded once). Each pass compares the folders
with what the lake already says (loaded at start, so a restart reconciles whatever changed while the watcher
was down) and writes only differences. watchdog events just wake the loop early.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from ingest.inbox import Inbox
from ingest.settling import Stability
from ingest.skills_mirror import SkillsMirror
from ingest.watch_journal import Journal
from lake import Lake
from lake.errors import LAKE_ERRORS

log = logging.getLogger("lachesis.ingest.watch")


class Watcher:
    """`skills_dir` mirrored and an inbox ingested (`inbox_dir`, or Hermes' working folder `hermes_dir`), both
    optional; `scan()` is one pass of each, `run(stop)` the loop, `stats` the counters."""

    def __init__(self, lake: Lake, *, skills_dir: Path | None = None, inbox_dir: Path | None = None,
                 settle: float = 0.5, max_file_bytes: int = 256 << 20, inflate_ratio: float = 100.0,
                 writer_name: str = "ingest-watch", echo=None, hermes_dir: Path | None = None):
        if inbox_dir and hermes_dir:
            raise ValueError("one inbox: a dedicated folder (inbox_dir) or Hermes' working folder (hermes_dir)")
        self.lake = lake
        self.journal = Journal(lake, writer_name, echo)
        self.stats = self.journal.stats
        self.stab = Stability(settle)
        self.wake = threading.Event()
        self.mirror = SkillsMirror(lake, skills_dir, self.journal, self.stab) if skills_dir else None
        self.inbox = (Inbox(lake, inbox_dir or hermes_dir, self.journal, self.stab, hermes_only=hermes_dir is not None,
                            max_file_bytes=max_file_bytes, inflate_ratio=inflate_ratio)
                      if inbox_dir or hermes_dir else None)
        self.parts = [part for part in (self.mirror, self.inbox) if part is not None]  # skills first

    def summary(self) -> str:
        """One line for `lake watch --once`: what the passes so far changed, per watched folder."""
        st, parts = self.stats, []
        if self.mirror is not None:
            parts.append(f"skills: {st['skill_upserts']} version(s) written, {st['skill_deletes']} deleted, "
                         f"{st['usage_events']} usage change(s)")
        if self.inbox is not None:
            parts.append(f"inbox: {st['files_done']} file(s) ingested ({st['trajectories']} trajectories, "
                         f"{st['duplicates']} duplicate(s)), {st['files_rejected']} rejected")
            if self.inbox.left_alone:
                parts.append(f"{len(self.inbox.left_alone)} other .jsonl file(s) left where they are (not Hermes' names)")
        if st["errors"]:
            parts.append(f"{st['errors']} error(s) recorded in ingest_errors")
        return "; ".join(parts)

    def scan(self) -> int:
        self.stab.waiting = False
        n = sum(part.scan() for part in self.parts)
        self.stats["passes"] += 1
        return n

    def run(self, stop: threading.Event, interval: float = 2.0) -> None:
        observer = _start_observer([part.folder for part in self.parts], self.wake, interval)
        try:
            while not stop.is_set():
                try:
                    self.scan()
                except LAKE_ERRORS:  # never die on one bad pass (a lake hiccup): log and try again
                    log.exception("watch pass failed")
                timeout = min(self.stab.settle / 2 or 0.05, interval) if self.stab.waiting else interval
                self.wake.wait(timeout)
                self.wake.clear()
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=2)


def _start_observer(dirs: list[Path], wake: threading.Event, interval: float):
    """A watchdog observer that sets `wake` on any change under `dirs`; None (poll only) without watchdog
    (an optional dependency, the `server` extra) or when the OS refuses more watches."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError as exc:
        log.warning("watchdog unavailable (%s); polling every %.1fs", exc, interval)
        return None

    class Wake(FileSystemEventHandler):
        def on_any_event(self, event):
            wake.set()

    observer = Observer()
    try:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            observer.schedule(Wake(), str(d), recursive=True)
        observer.start()
    except OSError as exc:  # e.g. the inotify watch limit
        log.warning("cannot watch (%s); polling every %.1fs", exc, interval)
        return None
    return observer
