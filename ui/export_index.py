"""Which dataset exports hold a trajectory: the conversation page's links to them, read from the folder `lake ui
--exports` names (the export button writes there; `lake export --output` may too).

The lake does not record exports, and an export's manifest (views/export.py) holds its lake versions and a hash of
its event ids, not its ids: so each export folder of that folder (a folder holding a manifest.json) is read, its
rows' trajectory ids taken from its data files, and kept. A trajectory id column is `trajectory_id` or one named
`*_trajectory_id` (dpo's `chosen_trajectory_id` and `rejected_trajectory_id`), as the manifest's `columns` list
them; an export whose rows have none is listed as such (whether it holds the trajectory cannot be told from its
rows: the page says so rather than guess). The files read are the ones its manifest lists, by their format
(parquet: that column only; jsonl: line by line; hf: its Arrow streams batch by batch), each opened without
following a link on the way (ground.files.open_fd), regular files only.

Kept per export folder and keyed by its manifest's mtime and size (an export folder is written once; --overwrite
replaces its manifest last), so a page reads each export once, not at every load: each column's distinct ids as one
sorted Arrow array, found by bisection (exact, no hash). Bounded: at most MAX_EXPORTS folders a page (the newest
manifests first), an export of more than MAX_EXPORT_ROWS rows not read, at most MAX_KEPT_BYTES of ids kept (the
least recently used dropped past it), and a page stops reading new exports after SCAN_S seconds (the next load goes
on): what is not read says so.
"""
from __future__ import annotations

import bisect
import collections
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ground.files import Refusal, open_fd, read_regular
from lake.as_of import MANIFEST_NAME as MANIFEST  # the name views/export.py writes

MAX_MANIFEST_BYTES = 4 << 20
MAX_EXPORTS = 100
MAX_EXPORT_ROWS = 2_000_000
MAX_KEPT_BYTES = 256 << 20
SCAN_S = 5.0
READERS = {"parquet": ".parquet", "jsonl": ".jsonl", "hf": ".arrow"}  # format: the data files' suffix


def id_columns(manifest: dict) -> list[str]:
    """The columns of an export's rows that hold trajectory ids (strings named trajectory_id or *_trajectory_id)."""
    cols = manifest.get("columns")
    return [c["name"] for c in cols if isinstance(c, dict) and isinstance(c.get("name"), str)
            and (c["name"] == "trajectory_id" or c["name"].endswith("_trajectory_id"))
            and str(c.get("type", "string")) in ("string", "large_string")] if isinstance(cols, list) else []


def read_manifest(folder: Path, name: str) -> dict:
    """The manifest.json of the export folder `name` (one entry of `folder`), read without following a link;
    Refusal, OSError or ValueError when it cannot be."""
    if not name or "/" in name or name in (".", ".."):
        raise Refusal(f"{name!r}: not an export folder's name", "outside")
    manifest = json.loads(read_regular(folder, f"{name}/{MANIFEST}", MAX_MANIFEST_BYTES))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise ValueError("not a manifest of `lake export`")
    return manifest


class SortedIds:
    """One column's distinct ids, sorted, as an Arrow array; `in` by bisection."""

    def __init__(self, values: pa.ChunkedArray | pa.Array):
        unique = pc.unique(values.cast(pa.large_string()))
        unique = unique.filter(pc.is_valid(unique))
        self.ids = unique.take(pc.sort_indices(unique))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> str:
        return self.ids[i].as_py()

    def __contains__(self, value: str) -> bool:
        i = bisect.bisect_left(self, value)
        return i < len(self.ids) and self[i] == value

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes


@dataclass
class Export:
    """One export folder as the page lists it."""

    name: str
    view: str = ""
    format: str = ""
    rows: int | None = None
    versions: dict = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)  # its trajectory id columns
    held_in: list[str] = field(default_factory=list)  # those holding the trajectory asked
    why: str = ""  # why it was not read


@dataclass
class Holding:
    """The exports folder's answer for one trajectory."""

    found: list[Export]  # exports whose rows hold it
    no_column: list[Export]  # exports whose rows carry no trajectory id
    unread: list[Export]  # exports not read, each with `why`
    looked: int  # export folders looked at
    total: int  # export folders in the folder
    error: str | None = None  # the folder itself could not be read

    @property
    def cut(self) -> bool:
        return self.looked < self.total


@dataclass
class _Kept:
    key: tuple[int, int]  # the manifest's mtime_ns and size
    export: Export
    ids: dict[str, SortedIds]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.ids.values())


class ExportIndex:
    """The exports of `folder` (None: exports off, nothing to look at), read once each and kept."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = Path(folder) if folder is not None else None
        self._kept: collections.OrderedDict[str, _Kept] = collections.OrderedDict()
        self._lock = threading.Lock()  # one page reads the folder at a time: others wait, then find it kept

    def holding(self, trajectory_id: str) -> Holding | None:
        """Which exports hold `trajectory_id` (None when the server has no exports folder)."""
        if self.folder is None:
            return None
        try:
            entries = self._exports()
        except FileNotFoundError:  # no export yet: the button makes the folder
            entries = []
        except OSError as exc:
            return Holding([], [], [], 0, 0, f"the exports folder {self.folder} cannot be read: {exc.strerror or exc}")
        found, no_column, unread = [], [], []
        deadline = time.monotonic() + SCAN_S
        with self._lock:
            for name, key in entries[:MAX_EXPORTS]:
                kept = self._kept.get(name)
                if kept is None or kept.key != key:
                    if time.monotonic() > deadline:
                        unread.append(Export(name, why="not read yet: this page ran out of time reading exports "
                                                        "(reload to read more)"))
                        continue
                    kept = self._read(name, key)
                    self._keep(name, kept)
                self._kept.move_to_end(name)
                e = kept.export
                if e.why:
                    unread.append(e)
                elif not e.columns:
                    no_column.append(e)
                else:
                    held = [c for c, ids in kept.ids.items() if trajectory_id in ids]
                    if held:
                        found.append(Export(e.name, e.view, e.format, e.rows, e.versions, e.columns, held))
        return Holding(found, no_column, unread, min(len(entries), MAX_EXPORTS), len(entries))

    def _exports(self) -> list[tuple[str, tuple[int, int]]]:
        """(name, manifest key) of every export folder, newest manifest first. A folder that is a link, or whose
        manifest is not a regular file, is none."""
        out = []
        with os.scandir(self.folder) as it:
            for entry in it:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                try:
                    st = os.stat(os.path.join(entry.path, MANIFEST), follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((entry.name, (st.st_mtime_ns, st.st_size)))
        out.sort(key=lambda e: (-e[1][0], e[0]))
        return out

    def _keep(self, name: str, kept: _Kept) -> None:
        self._kept[name] = kept
        total = sum(k.nbytes for k in self._kept.values())
        while total > MAX_KEPT_BYTES and len(self._kept) > 1:
            _, dropped = self._kept.popitem(last=False)
            total -= dropped.nbytes

    def _read(self, name: str, key: tuple[int, int]) -> _Kept:
        """One export folder read: its manifest, and its rows' trajectory ids (or why not)."""
        try:
            m = read_manifest(self.folder, name)
        except (Refusal, OSError, ValueError) as exc:
            return _Kept(key, Export(name, why=f"its manifest is not read: {getattr(exc, 'reason', None) or exc}"), {})
        versions = m.get("lake_versions") if isinstance(m.get("lake_versions"), dict) else {}
        rows = m.get("row_count") if isinstance(m.get("row_count"), int) else None
        e = Export(name, str(m.get("view") or ""), str(m.get("format") or ""), rows, versions, id_columns(m))
        if not e.columns:
            return _Kept(key, e, {})
        if e.format not in READERS:
            e.why = f"its format {e.format[:40]!r} is not read here"
        elif rows is None or rows > MAX_EXPORT_ROWS:
            e.why = f"not read: {rows if rows is not None else 'an unknown number of'} rows (at most {MAX_EXPORT_ROWS:,})"
        if e.why:
            return _Kept(key, e, {})
        try:
            ids = self._ids(name, m, e)
        except (Refusal, OSError, ValueError, KeyError, pa.ArrowException) as exc:
            e.why = f"its files are not read: {getattr(exc, 'reason', None) or str(exc)[:300]}"
            return _Kept(key, e, {})
        return _Kept(key, e, ids)

    def _ids(self, name: str, manifest: dict, e: Export) -> dict[str, SortedIds]:
        suffix = READERS[e.format]
        paths = [f["path"] for f in manifest["files"] if isinstance(f, dict) and isinstance(f.get("path"), str)
                 and f["path"].endswith(suffix)]
        chunks: dict[str, list[pa.Array]] = {c: [] for c in e.columns}
        seen = 0
        for rel in paths:
            fd, _ = open_fd(self.folder, f"{name}/{rel}")  # no link followed; a `..` is a Refusal
            with os.fdopen(fd, "rb") as fh:
                for batch in _batches(fh, e.format, e.columns):
                    seen += len(batch[e.columns[0]])
                    if seen > MAX_EXPORT_ROWS:
                        raise ValueError(f"more than {MAX_EXPORT_ROWS:,} rows")
                    for c in e.columns:
                        chunks[c].append(batch[c])
        return {c: SortedIds(pa.chunked_array(v, type=pa.large_string()) if v else pa.array([], pa.large_string()))
                for c, v in chunks.items()}


def _batches(fh: Any, fmt: str, columns: list[str]) -> Iterator[dict[str, pa.Array]]:
    """{column: ids} per batch of a data file's rows."""
    if fmt == "parquet":
        pf = pq.ParquetFile(fh)
        for b in pf.iter_batches(columns=columns, batch_size=65536):
            yield {c: b.column(c).cast(pa.large_string()) for c in columns}
    elif fmt == "hf":
        reader = pa.ipc.open_stream(fh)
        for b in reader:
            yield {c: b.column(c).cast(pa.large_string()) for c in columns}
    else:  # jsonl: one JSON object a line
        values: dict[str, list] = {c: [] for c in columns}
        for line in fh:
            if not line.strip():
                continue
            rec = orjson.loads(line)
            for c in columns:
                v = rec.get(c) if isinstance(rec, dict) else None
                values[c].append(v if isinstance(v, str) else None)
            if len(values[columns[0]]) >= 65536:
                yield {c: pa.array(v, pa.large_string()) for c, v in values.items()}
                values = {c: [] for c in columns}
        if values[columns[0]]:
            yield {c: pa.array(v, pa.large_string()) for c, v in values.items()}
