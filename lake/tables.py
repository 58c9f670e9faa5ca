"""The lake's directory: one Delta table per event stream plus the registry of consumers' offsets.

This is the part of a lake that readers need (snapshots, the change feed, compaction, vacuum, consumers),
kept apart from `lake.lake` so that those modules depend on it and `Lake` composes them, without an
import circle. It holds no writers and no open DuckDB connections.

The root is a local directory or an object-store URL (lake/store.py): every path here goes through the
Store, every Delta table is opened with its storage options.

It keeps one DeltaTable per table at the latest version and advances it with `update_incremental`, which
reads only the commits since the last call, a fraction of opening a table from its log (docs/lake-design.md,
"Figures behind the code"), so a long-lived process (server, watcher, trainer) opens snapshots without re-reading logs.
"""
from __future__ import annotations

import threading
from datetime import datetime
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lake.as_of import AsOf, parse_as_of
from lake.errors import LakeError, NoLakeError
from lake.schemas import TABLES
from lake.store import Location, Store, to_fs_path

MARKER = "_lachesis"
MARKER_FILE = "lake.json"  # object storage has no empty directories: the marker is a file in MARKER
STATE_CACHE = 32  # (table, version) file lists kept: a few versions of each table


@dataclass(frozen=True)
class TableState:
    """What a reader needs of one table at one version: its data files and its Delta schema (as Arrow)."""

    table: str
    version: int
    files: tuple[str, ...]
    schema: pa.Schema


def is_lake(root: Location | Store, storage_options: Mapping[str, str] | None = None) -> bool:
    store = root if isinstance(root, Store) else Store(root, storage_options)
    if store.local:
        return Path(store.root, MARKER).is_dir()
    return store.exists(MARKER, MARKER_FILE)


def init_layout(store: Store) -> None:
    """The lake's own folder: the marker (a file, so object storage has it too) and the consumers' registry."""
    if store.local:
        Path(store.uri(MARKER, "consumers")).mkdir(parents=True, exist_ok=True)
    if not store.exists(MARKER, MARKER_FILE):
        store.write_bytes(orjson.dumps({"lake": "lachesis"}), MARKER, MARKER_FILE)


class TableSet:
    """The Delta tables under one lake root, read at their latest or a pinned version."""

    def __init__(self, root: Location, storage_options: Mapping[str, str] | None = None):
        self.store = Store(root, storage_options)
        self.root = self.store.root  # a Path for a local lake, an s3://... URL otherwise
        self.store.check_reachable()  # an endpoint that never answers: one line in seconds, not 13 s of retries
        if not is_lake(self.store):
            raise NoLakeError(str(self.root))
        self._lock = threading.Lock()
        self._latest: dict[str, DeltaTable] = {}
        self._states: OrderedDict[tuple[str, int], TableState] = OrderedDict()
        self._file_columns: dict[str, frozenset[str]] = {}
        self._present: set[str] = set()  # tables seen to exist

    def tables(self) -> list[str]:
        missing = [t for t in TABLES if t not in self._present]
        if missing:  # a table, once there, stays: only the absent ones are looked for again (a LIST on S3)
            self._present.update(t for t in missing if self.store.exists(t, "_delta_log"))
        return [t for t in TABLES if t in self._present]

    def table_path(self, table: str) -> Path | str:
        """The table's directory: a Path for a local lake, an s3://... URI otherwise (lake.store.join)."""
        if table not in TABLES:
            raise LakeError(f"unknown table '{table}'; tables: {', '.join(TABLES)}")
        return Path(self.store.uri(table)) if self.store.local else self.store.uri(table)

    def delta_table(self, table: str, version: int | None = None) -> DeltaTable:
        path = str(self.table_path(table))
        if table not in self.tables():
            raise LakeError(f"table '{table}' does not exist in {self.root}; run `lake init`")
        if version is None:
            with self.store.reaching():
                return DeltaTable(path, storage_options=self.store.storage_options)
        try:
            return DeltaTable(path, version=version, storage_options=self.store.storage_options)
        except DeltaError as exc:
            raise LakeError(f"table '{table}' has no version {version}: {exc}") from None

    def version(self, table: str) -> int:
        """The latest version, read incrementally from the log (see the module docstring)."""
        with self._lock:
            return self._advance(table).version()

    def state(self, table: str, version: int | None = None) -> TableState:
        """Files and schema of `table` at `version` (None: the latest), cached per (table, version)."""
        with self._lock:
            dt = self._advance(table)
            if version is None:
                version = dt.version()
            key = (table, version)
            if key not in self._states:
                at = dt if version == dt.version() else self.delta_table(table, version)
                self._states[key] = TableState(table, version, tuple(at.file_uris()),
                                               pa.schema(at.schema().to_arrow()))  # arro3 -> pyarrow
                while len(self._states) > STATE_CACHE:
                    self._states.popitem(last=False)
            self._states.move_to_end(key)
            return self._states[key]

    def version_at(self, table: str, when: datetime) -> int:
        """The newest version of `table` committed at or before `when` (its commit times: `lake log`); a LakeError
        when the table did not exist yet."""
        with self._lock:
            commits = self._advance(table).history()
        at_ms = when.timestamp() * 1000
        done = [c["version"] for c in commits if c.get("timestamp") is not None and c["timestamp"] <= at_ms]
        if not done:
            raise LakeError(f"table '{table}' has no version committed at or before {when.isoformat()}")
        return max(done)

    def file_columns(self, files: Iterable[str]) -> list[frozenset[str]]:
        """Top-level column names in each Parquet file's footer, read once per file per process (a data file is
        never rewritten in place: a new version of its rows is a new file)."""
        out = []
        for f in files:
            cols = self._file_columns.get(f)
            if cols is None:
                cols = self._file_columns[f] = frozenset(pq.read_schema(to_fs_path(f), filesystem=self.store.fs).names)
            out.append(cols)
        return out

    def partition_files(self, table: str) -> dict[str, list[int]]:
        """{day: sizes in bytes of its live files} at the latest version."""
        with self._lock:
            actions = pa.table(self._advance(table).get_add_actions(flatten=True))
        out: dict[str, list[int]] = {}
        if actions.num_rows:
            for day, size in zip(actions.column("partition.day").to_pylist(), actions.column("size_bytes").to_pylist()):
                out.setdefault(day, []).append(size)
        return out

    def _advance(self, table: str) -> DeltaTable:
        dt = self._latest.get(table)
        if dt is None:
            dt = self._latest[table] = self.delta_table(table)
        else:
            dt.update_incremental()
        return dt

    def resolve_versions(self, as_of: AsOf = None, tables: Iterable[str] | None = None) -> dict[str, int]:
        """Pin every table (or only `tables`): None = latest; int N = min(N, latest); {table: N} = those, others
        latest; a time = each table's newest version committed by then (`version_at`); any spelling of `lake.as_of`
        (text, a dataset folder or its manifest.json) is parsed first."""
        as_of = parse_as_of(as_of)
        every = self.tables()
        if isinstance(as_of, Mapping):
            unknown = [t for t in as_of if t not in every]
            if unknown:
                raise LakeError(f"unknown table '{unknown[0]}' in as-of; tables: {', '.join(every)}")
        wanted = every if tables is None else [t for t in every if t in set(tables)]
        if isinstance(as_of, datetime):
            return {t: self.version_at(t, as_of) for t in wanted}
        latest = {t: self.version(t) for t in wanted}
        if as_of is None:
            return latest
        if isinstance(as_of, int):
            if as_of < 0:
                raise LakeError(f"version must be >= 0, got {as_of}")
            return {t: min(as_of, v) for t, v in latest.items()}
        if isinstance(as_of, Mapping):
            out = dict(latest)
            for t, v in as_of.items():
                if t not in latest:
                    continue  # a table this snapshot does not read
                if not 0 <= int(v) <= latest[t]:
                    raise LakeError(f"table '{t}' has versions 0..{latest[t]}, not {v}")
                out[t] = int(v)
            return out

    # -- consumers: how far each has read, so vacuum keeps what it still needs --------------------------
    def register_consumer(self, name: str, offsets: Mapping[str, int]) -> None:
        """Record how far consumer `name` has read each table, so vacuum keeps what it still needs."""
        if not name or "/" in name or name.startswith("."):
            raise LakeError(f"bad consumer name {name!r}")
        where = (MARKER, "consumers", f"{name}.json")
        with self._lock:
            merged = {**(orjson.loads(self.store.read_bytes(*where))["offsets"] if self.store.exists(*where) else {}),
                      **offsets}
            self.store.write_bytes(orjson.dumps({"name": name, "offsets": merged}, option=orjson.OPT_INDENT_2), *where)

    def consumers(self) -> dict[str, dict[str, Any]]:
        out = {}
        for file in self.store.list_names(MARKER, "consumers"):
            if file.endswith(".json") and not file.startswith("."):
                out[file[:-5]] = orjson.loads(self.store.read_bytes(MARKER, "consumers", file))["offsets"]
        return out
