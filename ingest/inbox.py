"""`lake watch --inbox DIR` / `--hermes-dir DIR`: trajectory files dropped into a folder, ingested into the lake.

The inbox takes only trajectory files by name, by one of two rules:
- `--inbox DIR`, a dedicated folder files are dropped into: every JSON-lines file (`INBOX_SUFFIXES`, plain or
  gzip); one that cannot be read is moved to `.rejected/` with its reason, since it was put there to be ingested.
- `--hermes-dir DIR`, the folder Hermes Agent runs in: only Hermes' own file names (`HERMES_NAMES`: it appends
  `trajectory_samples.jsonl` / `failed_trajectories.jsonl`, or `.jsonl.gz`, to the folder it runs in, and
  batch_runner writes `trajectories.jsonl` beside `checkpoint.json`), because the user's own files live there
  too: a `mydata.jsonl` beside them was moved to `.rejected/` when that folder was watched as an inbox. Any other
  JSON-lines file there stays where it is, said once.
Every other file (notes.md, scripts, `.json` documents) is left where it is; `lake import` reads `.json` files
when asked to.

A file is read once its signature settled (settling.py), whole, through `lake import`'s reader (ids already in
the lake are skipped), then moved to `.done/`; one that grew while it was read is read again once stable. A
file that failed for a reason that may pass (disk, lake) is retried with a back-off, the others proceed.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import time
from pathlib import Path

from edge.errors import BadInput
from edge.options import inflate_limit
from ingest.dedupe import trajectory_guard
from ingest.importer import ingest_file
from ingest.safe_files import open_file
from ingest.settling import Backoff, Stability, file_sig, is_temp
from ingest.watch_journal import Journal
from lake import Lake
from lake.errors import LAKE_ERRORS

log = logging.getLogger("lachesis.ingest.watch")

INBOX_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
# Hermes Agent's trajectory files (run_agent.py: trajectory_samples / failed_trajectories, newer versions with a
# suffix and .gz; batch_runner.py: trajectories.jsonl); docs/hermes-formats.md
HERMES_NAMES = re.compile(r"^(?:(?:trajectory_samples|failed_trajectories)[^/]*|trajectories)\.jsonl(?:\.gz)?$")
HERMES_NAMES_TEXT = "trajectory_samples*.jsonl, failed_trajectories*.jsonl (plain or .gz), trajectories.jsonl"


def is_inbox_file(name: str) -> bool:
    """A file the inbox takes: a JSON-lines trajectory file that is not a dot-file or an editor temp file."""
    return name.lower().endswith(INBOX_SUFFIXES) and not is_temp(name)


def is_hermes_file(name: str) -> bool:
    """A file `--hermes-dir` takes: one of Hermes Agent's own trajectory file names."""
    return bool(HERMES_NAMES.match(name)) and not is_temp(name)


class Inbox:
    """The inbox `folder` ingested into `lake` through `journal`'s writer; `scan()` is one pass. `hermes_only`:
    Hermes' working folder (its own file names only); `max_file_bytes` and `inflate_ratio` bound a file's
    inflated size."""

    def __init__(self, lake: Lake, folder: Path, journal: Journal, stab: Stability, *, hermes_only: bool = False,
                 max_file_bytes: int = 256 << 20, inflate_ratio: float = 100.0):
        self.folder = Path(folder).resolve()
        self.journal = journal
        self.stab = stab
        # Hermes' folder is an inbox with a narrower rule: its own file names only (the module docstring)
        self.hermes_only = hermes_only
        self.left_alone: set[str] = set()  # JSON-lines files --hermes-dir does not take, each said once
        self.max_file_bytes, self.inflate_ratio = max_file_bytes, inflate_ratio
        self.backoff = Backoff()
        self.ids = trajectory_guard(lake).keys  # also checked at commit time (ingest.dedupe)

    def scan(self) -> int:
        """One pass over the folder; -> how many files it tried."""
        inbox = self.folder
        if not inbox.is_dir():
            return 0
        n = 0
        for entry in sorted(os.scandir(inbox), key=lambda e: e.name):
            if not entry.is_file(follow_symlinks=False) or not is_inbox_file(entry.name):
                continue  # not a trajectory file: not ours to read or move
            if self.hermes_only and not is_hermes_file(entry.name):
                if entry.name not in self.left_alone:  # the user's own file beside Hermes': not ours to move
                    self.left_alone.add(entry.name)
                    self.journal.echo(f"left {entry.name} where it is: not a Hermes trajectory file name ({HERMES_NAMES_TEXT}); "
                              f"to ingest it, drop it into an --inbox folder or run `lake import {entry.path}`")
                continue
            p = Path(entry.path)
            sig = self.stab.stable(p)
            if sig is None or not self.backoff.ready(entry.name, sig):
                continue
            n += 1
            try:
                # opened without following a link, and only as a regular file (ingest.safe_files): the entry
                # may have been swapped for a link or a FIFO since it was listed
                with open_file(inbox, entry.name) as (fh, st):
                    limit = inflate_limit(st.st_size, self.max_file_bytes, self.inflate_ratio)  # a gzip bomb stops
                    res = ingest_file(self.journal.writer, p, ids=self.ids, max_bytes=limit, fileobj=fh)
            except (BadInput, RecursionError) as exc:
                if file_sig(p) == sig:
                    self._reject(p, exc if isinstance(exc, BadInput) else
                                 BadInput("nested too deeply to read", kind="too_deep"))
                # else the file grew while it was read (Hermes appends to its files): read it again once stable
                continue
            except LAKE_ERRORS as exc:  # transient (disk, lake): back off this file, the others proceed
                k = self.backoff.failed(entry.name, sig)
                if k & (k - 1) == 0:  # the 1st, 2nd, 4th... failure in a row
                    log.warning("cannot ingest %s now (%d failure(s) in a row): %s", p, k, exc)
                continue
            self.backoff.ok(entry.name)
            self.journal.stats["trajectories"] += res.appended
            self.journal.stats["duplicates"] += res.duplicates
            self.journal.echo(f"inbox {p.name}: {res.appended} trajectories ({res.format}), "
                      f"{res.duplicates} duplicate(s)")
            if file_sig(p) != sig:
                continue  # appended to while it was read: the next pass reads it whole (ids skip what is in)
            self._move(p, inbox / ".done")
            self.journal.stats["files_done"] += 1
        return n

    def _move(self, p: Path, dest_dir: Path) -> Path:
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / p.name
        k = 1
        while dest.exists():
            dest = dest_dir / f"{p.name}.{k}"
            k += 1
        shutil.move(str(p), str(dest))
        self.stab.forget(p)
        return dest

    def _reject(self, p: Path, exc: BadInput):
        dest = self._move(p, self.folder / ".rejected")
        lines = [f"file: {p.name}", f"reason: {exc.reason}"]
        if exc.line is not None:
            lines.append(f"line: {exc.line}")
        if exc.field is not None:
            lines.append(f"field: {exc.field_str()}")
        lines.append(f"error: {exc.describe()}")
        Path(str(dest) + ".error.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.journal.stats["files_rejected"] += 1
        self.journal.error(str(p), exc, f"inbox:{dest.name}:{time.time_ns()}", {"moved_to": str(dest)})
