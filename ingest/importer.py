"""Batch import of trajectory files (`lake import`): parse every file whole, then one append per file.

A file is all or nothing: a bad line rejects that file (nothing of it is written) and is reported with its
line and reason, plus an `ingest_errors` event. Re-importing a file writes nothing new: record ids are
derived from content, and ids already in the lake are skipped.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from edge.errors import BadInput
from ingest.formats import TRAJECTORY_SUFFIXES, parse_file
from ingest.dedupe import trajectory_guard
from ingest.records import append_records
from ingest.safe_files import open_file, open_named
from lake import Lake
from lake.lake import process_writer_id


@dataclass
class FileResult:
    path: str
    format: str | None = None
    records: int = 0
    appended: int = 0
    duplicates: int = 0
    version: int | None = None
    error: str | None = None
    line: int | None = None
    field: str | None = None


@dataclass
class ImportSummary:
    files: list = field(default_factory=list)
    records: int = 0
    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    seconds: float = 0.0

    def to_dict(self):
        d = asdict(self)
        d["records_per_s"] = round(self.records / self.seconds, 1) if self.seconds else None
        return d


def is_trajectory_file(p: Path) -> bool:
    n = p.name.lower()
    return not n.startswith(".") and n.endswith(TRAJECTORY_SUFFIXES)


def list_files(path: Path) -> list[Path]:
    """The trajectory files of a folder, sorted, dot-files and dot-folders left out; links to folders are
    listed, not entered (`run_import` refuses every link: nothing outside the folder is read). A path that is
    not a folder is itself the one file."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        links = {d for d in dirnames if os.path.islink(os.path.join(dirpath, d))}
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in links)
        for f in sorted(filenames + [d for d in links if not d.startswith(".")]):
            p = Path(dirpath) / f
            if is_trajectory_file(p) or f in links:
                out.append(p)
    return out


@contextmanager
def open_input(root: Path, p: Path) -> Iterator[BinaryIO]:
    """`p` opened for reading: inside a folder `root` without following any link, a file named alone as named;
    a regular file either way (ingest.safe_files: a link, FIFO or device is Refused, a rejected input)."""
    if root.is_dir():
        with open_file(root, p.relative_to(root).as_posix()) as (fh, _):
            yield fh
    else:
        with open_named(p) as fh:
            yield fh


def ingest_file(writer, path: Path, fmt: str = "auto", *, ids: set[str] | None = None,
                max_bytes: int | None = None, progress=None, fileobj: BinaryIO | None = None) -> FileResult:
    """Parse + append one file (read from `fileobj` when given); raises BadInput (nothing written) for a bad
    file."""
    res = FileResult(str(path))
    parsed = parse_file(path, fmt, max_bytes=max_bytes, progress=progress, fileobj=fileobj)
    res.format = parsed.fmt
    res.records = len(parsed.records)
    seen = set()
    keep, lines = [], []
    for r, line in zip(parsed.records, parsed.record_lines):
        tid = r["trajectory_id"]
        if tid in seen or (ids is not None and tid in ids):
            res.duplicates += 1
            continue
        seen.add(tid)
        keep.append(r)
        lines.append(line)
    skipped = 0
    if keep:
        try:
            out = append_records(writer, keep, locs=lines)
        except BadInput as exc:  # its field path starts with the record's line: report it as the line
            line, *where = exc.field
            raise BadInput(exc.reason, line=line, field=".".join(map(str, where)) or None, kind="schema") from None
        res.version = out.version
        skipped = out.skipped  # ids another process (the watcher, a server) committed meanwhile
    res.appended = len(keep) - skipped
    res.duplicates += skipped
    if ids is not None:
        ids.update(seen)
    return res


def run_import(lake: Lake, path: Path, fmt: str = "auto", *, on_file_start=None, progress=None,
               writer_name: str = "ingest-import") -> ImportSummary:
    t0, path = time.perf_counter(), Path(path)
    writer = lake.writer(process_writer_id(writer_name))
    ids = trajectory_guard(lake).keys  # also checked at commit time, against what other processes committed
    summary = ImportSummary()
    for p in list_files(path):
        if on_file_start:
            on_file_start(p)
        try:
            with open_input(path, p) as fh:
                fr = ingest_file(writer, p, fmt, ids=ids, progress=progress, fileobj=fh)
        except BadInput as exc:
            fr = FileResult(str(p), error=exc.reason, line=exc.line, field=exc.field_str())
            summary.rejected += 1
            writer.append("ingest_errors", [exc.error_record(p, "import")])
        except (OSError, UnicodeDecodeError) as exc:
            fr = FileResult(str(p), error=f"cannot read: {exc}")
            summary.rejected += 1
            writer.append("ingest_errors", [BadInput(f"cannot read: {exc}", kind="io").error_record(p, "import")])
        summary.files.append(asdict(fr))
        summary.records += fr.records
        summary.appended += fr.appended
        summary.duplicates += fr.duplicates
    summary.seconds = round(time.perf_counter() - t0, 3)
    return summary
