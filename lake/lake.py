"""The lake: a directory of Delta tables, one per event stream, plus a small registry of consumers."""
from __future__ import annotations

import functools
import os
import socket
import threading
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa
from deltalake import DeltaTable

from lake import delta
from lake.as_of import AsOf
from lake.autocompact import AutoCompactor, CompactThresholds
from lake.changes import read_changes
from lake.commit import AppendResult, Batch, GroupCommitter
from lake.envelope import TIMESTAMP, add_envelope, complete_payload, with_content_hash
from lake.errors import NoLakeError
from lake.locks import CommitGuard, TableLocks
from lake.records import validate_records
from lake.schemas import DEFAULT_EVENT_TYPES, SCHEMA_VERSIONS, TABLES, payload_schema
from lake.snapshot import Snapshot
from lake.store import Store, is_url, root_text
from lake.tables import TableSet, init_layout

DEFAULT_ROOT = "data/lake"


def resolve_root(path: str | os.PathLike | None) -> Path | str:
    """--lake PATH, else $LAKE_ROOT, else ./data/lake; an object-store URL (s3://bucket/prefix) stays a str."""
    root = path or os.environ.get("LAKE_ROOT") or DEFAULT_ROOT
    return root_text(root) if is_url(root) else Path(root)


def open_lake(root: str | os.PathLike | None = None, *, or_else: str | None = None, fsync: bool = True) -> "Lake":
    """The one way a command opens an existing lake: at `root`, else $LAKE_ROOT, else ./data/lake. None there is a
    NoLakeError naming the ways out (--lake, `lake init`, and the command's own `or_else`); opening never creates a
    lake, so a mistyped --lake makes nothing."""
    try:
        return Lake.open(root, fsync=fsync)
    except NoLakeError as exc:
        raise NoLakeError(exc.root, or_else) from None


def process_writer_id(name: str = "lake") -> str:
    # Unique per process: two processes must never share an app id (check-then-write is not atomic).
    return f"{name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Lake:
    """A lake opened for reading and writing: its tables (`table_set`), writers with group commit, snapshots.

    `Lake.open(path)` opens an existing lake and `Lake.init(path)` creates one (or opens it if it is there);
    both resolve a None path with `resolve_root`. `Lake(root)` is `open` without the resolution.
    """

    def __init__(self, root: str | os.PathLike, views_dir: str | os.PathLike | None = None, *, fsync: bool = True,
                 storage_options: Mapping[str, str] | None = None):
        # root: a directory or an s3:// URL, whose credentials come from storage_options or AWS_* (lake/store.py)
        self.table_set = TableSet(root, storage_options)  # raises LakeError when root holds no lake
        # fsync every commit's files, log entry and directories before acknowledging (ground/durable.py);
        # False keeps commits safe against a killed process but not against a power loss (benchmarks only)
        self.fsync = fsync
        self.root = self.table_set.root
        self.views_dir = Path(views_dir) if views_dir else default_views_dir()
        self._lock = threading.Lock()
        self._tables: dict[str, DeltaTable] = {}
        self._committers: dict[str, GroupCommitter] = {}
        self._seqs: dict[str, tuple[int, dict[str, int]]] = {}  # table -> (version, writer -> last seq at it)
        self._writers: dict[str, Writer] = {}
        self._default_writer: Writer | None = None
        self._locks = TableLocks(self.root, self.table_set.store.lock_dir())
        # table -> the guard that drops rows whose key is in the lake already, at commit time (lake/locks.py)
        self.guards: dict[str, CommitGuard] = {}

    # -- layout -----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike | None = None, views_dir: str | os.PathLike | None = None, *,
             fsync: bool = True, storage_options: Mapping[str, str] | None = None) -> "Lake":
        """The existing lake at `root` (None: $LAKE_ROOT, else ./data/lake); LakeError if there is none."""
        return cls(resolve_root(root), views_dir, fsync=fsync, storage_options=storage_options)

    @classmethod
    def init(cls, root: str | os.PathLike | None = None, views_dir: str | os.PathLike | None = None, *,
             fsync: bool = True, storage_options: Mapping[str, str] | None = None) -> "Lake":
        """Create the lake at `root` (None: $LAKE_ROOT, else ./data/lake) with every table; safe to run again."""
        store = Store(resolve_root(root), storage_options)
        store.check_reachable()  # one line within seconds, before delta-rs retries for minutes
        for table in TABLES:
            with store.reaching():
                delta.create_table(store.uri(table), table, store.storage_options)
            if fsync:
                delta.sync_commit(store.uri(table), 0)
        init_layout(store)  # the marker last: a lake whose init was cut short is no lake yet
        return cls(store.root, views_dir, fsync=fsync, storage_options=storage_options)

    def tables(self) -> list[str]:
        return self.table_set.tables()

    def table_path(self, table: str) -> Path:
        return self.table_set.table_path(table)

    def delta_table(self, table: str, version: int | None = None) -> DeltaTable:
        return self.table_set.delta_table(table, version)

    def version(self, table: str) -> int:
        return self.table_set.version(table)

    # -- writing ----------------------------------------------------------------------------------------
    def writer(self, writer_id: str) -> "Writer":
        with self._lock:
            if writer_id not in self._writers:
                self._writers[writer_id] = Writer(self, writer_id)
            return self._writers[writer_id]

    @property
    def default_writer(self) -> "Writer":
        with self._lock:
            if self._default_writer is None:
                self._default_writer = Writer(self, process_writer_id())
            return self._default_writer

    def append(self, table: str, records: Iterable[Mapping[str, Any]], *, writer_id: str | None = None,
               seq: int | None = None) -> AppendResult:
        w = self.writer(writer_id) if writer_id else self.default_writer
        return w.append(table, records, seq=seq)

    def append_arrow(self, table: str, payload: pa.Table, *, writer_id: str | None = None,
                     seq: int | None = None, event_type: str | None = None) -> AppendResult:
        w = self.writer(writer_id) if writer_id else self.default_writer
        return w.append_arrow(table, payload, seq=seq, event_type=event_type)

    def _committer(self, table: str) -> GroupCommitter:
        with self._lock:
            if table not in self._committers:
                self._tables[table] = self.delta_table(table)
                self._committers[table] = GroupCommitter(lambda group, t=table: self._commit_group(t, group))
            return self._committers[table]

    def _commit_group(self, table: str, group: list[Batch]) -> None:
        """Commit one group as one version, under the table's cross-process lock (lake/locks.py)."""
        with self._locks.hold(table):
            self._commit_locked(table, group)

    def _commit_locked(self, table: str, group: list[Batch]) -> None:
        """Skip batches whose (writer, seq) the log already holds and rows the table's guard refuses; commit
        the rest as one version."""
        dt = self._tables[table]
        dt.update_incremental()
        # each writer's last sequence: what this Lake committed last, while nobody else has committed since
        # (one log lookup less per writer and commit); else read from the log
        mine = self._seqs.get(table)
        committed: dict[str, int] = dict(mine[1]) if mine and mine[0] == dt.version() else {}
        keep: list[Batch] = []
        txns: dict[str, int] = {}
        for b in group:
            if b.writer_id not in committed:
                last = dt.transaction_version(b.writer_id)
                committed[b.writer_id] = -1 if last is None else last
            floor = max(committed[b.writer_id], txns.get(b.writer_id, -1))
            seq = b.seq if b.seq is not None else floor + 1
            if seq <= floor:
                b.future.set_result(AppendResult(table, None, 0, duplicate=True, seq=seq))
                continue
            txns[b.writer_id] = seq
            b.seq = seq
            keep.append(b)
        guard = self.guards.get(table)
        if guard is not None and keep:
            keep = self._admit(table, guard, dt, keep)
        if not keep:
            self._seqs[table] = (dt.version(), committed)
            return
        data = add_envelope(
            table,
            pa.concat_tables([b.payload for b in keep]),
            sources=[(b.writer_id, b.payload.num_rows) for b in keep],
            schema_version=SCHEMA_VERSIONS[table],
            event_types=pa.concat_arrays([b.event_types for b in keep]),
            occurred_at=pa.concat_arrays([b.occurred_at for b in keep]),
            hashed=False,
        )
        version = delta.append(dt, self.table_path(table), data, txns, fsync=self.fsync,
                               prepare=functools.partial(with_content_hash, table))
        self._seqs[table] = (version, {**committed, **txns})
        if guard is not None:
            guard.committed(version, [b.payload for b in keep])
        for b in keep:
            b.future.set_result(AppendResult(table, version, b.payload.num_rows, seq=b.seq, skipped=b.skipped))

    @staticmethod
    def _admit(table: str, guard: CommitGuard, dt: DeltaTable, batches: list[Batch]) -> list[Batch]:
        """The batches with the rows `guard` refuses dropped; a batch left with none is answered here."""
        out = []
        for b, mask in zip(batches, guard.admit(dt, [b.payload for b in batches])):
            if mask is not None:
                n = b.payload.num_rows
                b.payload, b.event_types, b.occurred_at = (b.payload.filter(mask), b.event_types.filter(mask),
                                                           b.occurred_at.filter(mask))
                b.skipped = n - b.payload.num_rows
                if b.payload.num_rows == 0:
                    b.future.set_result(AppendResult(table, None, 0, seq=b.seq, skipped=b.skipped))
                    continue
            out.append(b)
        return out

    # -- reading ----------------------------------------------------------------------------------------
    def snapshot(self, as_of: AsOf = None, for_query: str | None = None, read_only: bool = False,
                 memory_mb: float | None = None) -> Snapshot:
        """A DuckDB view of the lake pinned at `as_of` (any spelling of lake.as_of; a bad one is an AsOfError,
        a LakeError); `for_query` registers only the tables and views that SQL reads; `read_only` for a user's
        SQL (lake/query.py: it can read the lake's files and write none), its queries within `memory_mb` MiB."""
        return Snapshot(self.table_set, as_of, self.views_dir, for_query=for_query, read_only=read_only,
                        memory_mb=memory_mb)

    def resolve_versions(self, as_of: AsOf = None) -> dict[str, int]:
        return self.table_set.resolve_versions(as_of)

    def changes(self, table: str, after_version: int, upto_version: int | None = None) -> pa.Table:
        return read_changes(self.table_set, table, after_version, upto_version)

    def autocompactor(self, thresholds: CompactThresholds | None = None) -> AutoCompactor:
        """Background compaction of this lake's small files (not started: call .start(), and .stop() at exit)."""
        return AutoCompactor(self.table_set, thresholds, fsync=self.fsync)

    # -- consumers --------------------------------------------------------------------------------------
    def register_consumer(self, name: str, offsets: Mapping[str, int]) -> None:
        self.table_set.register_consumer(name, offsets)

    def consumers(self) -> dict[str, dict[str, int]]:
        return self.table_set.consumers()


class Writer:
    """One writer id with a monotonic batch sequence per table, recorded as Delta app transactions."""

    def __init__(self, lake: Lake, writer_id: str):
        self.lake, self.writer_id = lake, writer_id

    def submit_arrow(self, table: str, payload: pa.Table, *, seq: int | None = None,
                     event_type: str | pa.Array | None = None, occurred_at: pa.Array | None = None) -> Future:
        self.lake.table_path(table)  # an unknown table is a LakeError before anything is queued
        payload = complete_payload(table, payload)
        n = payload.num_rows
        if event_type is None or isinstance(event_type, str):
            event_type = pa.array([event_type or DEFAULT_EVENT_TYPES[table]] * n, pa.string())
        if occurred_at is None:
            occurred_at = pa.nulls(n, TIMESTAMP)
        batch = Batch(payload, event_type, occurred_at.cast(TIMESTAMP), self.writer_id, seq, Future())
        return self.lake._committer(table).submit(batch)

    def append_arrow(self, table: str, payload: pa.Table, *, seq: int | None = None,
                     event_type: str | None = None) -> AppendResult:
        return self.submit_arrow(table, payload, seq=seq, event_type=event_type).result()

    def submit(self, table: str, records: Iterable[Mapping[str, Any]], *, seq: int | None = None) -> Future:
        """Validate (raises RecordError, writes nothing) and queue the batch; the future gives AppendResult."""
        self.lake.table_path(table)
        rows = validate_records(table, list(records))
        payload = pa.Table.from_pylist([r.payload for r in rows], schema=payload_schema(table))
        event_types = pa.array([r.event_type for r in rows], pa.string())
        occurred = pa.array([r.occurred_at for r in rows], pa.timestamp("us", tz="UTC"))
        return self.submit_arrow(table, payload, seq=seq, event_type=event_types, occurred_at=occurred)

    def append(self, table: str, records: Iterable[Mapping[str, Any]], *, seq: int | None = None) -> AppendResult:
        return self.submit(table, records, seq=seq).result()


def default_views_dir() -> Path:
    env = os.environ.get("LACHESIS_VIEWS_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "views"
