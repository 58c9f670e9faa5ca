"""One in-memory DuckDB database per process; each snapshot is a cursor on it with a schema of its own.

Why: `duckdb.connect()` costs ~14 ms, as much as the aggregate a snapshot is opened for (bench_lake), while a
cursor plus `CREATE SCHEMA` costs ~0.4 ms. Views bind names inside their own schema and `SET VARIABLE` is per
cursor, so snapshots on one database do not see each other's tables, views or variables. The database also
caches Parquet footers (`parquet_metadata_cache`), safe because a lake never rewrites a data file in place:
a snapshot opened after another reads no footer twice. The schema goes when its cursor is closed or
garbage-collected (a relation keeps its cursor alive, so `lake.snapshot().sql(q).fetchall()` is safe).

Object storage: DuckDB reads s3:// through its httpfs extension, which is downloaded at run time (`INSTALL
httpfs` fails offline: docs/lake-design.md, section 1) and is not shipped for DuckDB 2.x on PyPI. So each
object-store root is registered as an fsspec filesystem (pyarrow's S3FileSystem with the lake's credentials,
wrapped by fsspec's ArrowFSWrapper) under a protocol of its own, and a snapshot names its files with that
protocol (`lake3x1f2e...://bucket/key`): two roots with different credentials coexist in one process.

User SQL (`lake sql`, a `--where` filter) runs on a database of its own (`QueryDatabase`), never on the shared
one: DuckDB's `enable_external_access` is a per-database setting that cannot be turned back on, and it must be
off while a user's SQL runs. There every file, local or on object storage, is read through a registered
filesystem that answers only reads under the lake root (`_ReadOnlyFS`); that protocol is the one allowed
directory, everything else is off, and the configuration is locked before the user's statement runs. So a
COPY, ATTACH or INSTALL that got past lake.query's statement check still writes nothing, for a small cost on
reads (docs/lake-design.md, "Security limits of queries").
"""
from __future__ import annotations

import hashlib
import io
import itertools
import os
import tempfile
import threading
import weakref

from collections import OrderedDict

import duckdb
import pyarrow as pa
from fsspec.implementations.arrow import ArrowFSWrapper
from pyarrow.fs import FileInfo, FileType

from lake.store import Store, to_fs_path

_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_db_pid = -1
_names = itertools.count()
FILE_INFO_CACHE = 100_000  # data files whose size and mtime a bridge keeps (about 200 bytes each)
OPEN_FILES = 4096  # data files whose pyarrow handle a bridge keeps open (no connection is held between reads)
_protocols: dict[str, str] = {}  # object-store root -> the protocol registered for it on `_db`


def database() -> duckdb.DuckDBPyConnection:
    """The process's database (a new one after a fork: DuckDB state must not cross processes)."""
    global _db, _db_pid
    with _lock:
        if _db is None or _db_pid != os.getpid():
            _db = duckdb.connect()
            _db.execute("SET GLOBAL parquet_metadata_cache = true")  # a config key at connect needs parquet loaded
            _db_pid = os.getpid()
            _protocols.clear()
        return _db


def session() -> tuple[duckdb.DuckDBPyConnection, weakref.finalize]:
    """A cursor whose default schema is a fresh, empty one, and the finalizer that drops that schema: called
    by the owner's close(), or by the garbage collector with the cursor."""
    db = database()
    name = f"snapshot_{os.getpid()}_{next(_names)}"
    cur = db.cursor()
    cur.execute(f'CREATE SCHEMA "{name}"')
    cur.execute(f'USE "{name}"')
    return cur, weakref.finalize(cur, _drop_schema, db, name)


def _drop_schema(db: duckdb.DuckDBPyConnection, name: str) -> None:
    try:
        with db.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    except duckdb.ConnectionException:  # the database closed first (interpreter exit)
        pass


class _StoreFS(ArrowFSWrapper):
    """An object-store root's pyarrow filesystem as DuckDB sees it: `<protocol>://bucket/key` -> `bucket/key`.
    Subclassed per root (`_store_fs`): fsspec reads `protocol` from the class.

    DuckDB asks for a file's existence, size and mtime several times per view it binds, each a HEAD request
    (dozens per data file for a snapshot with the views/*.sql views: docs/lake-design.md). A lake never
    rewrites a data file in place, so what it learnt of a file holds for the process: its size and mtime, and
    one open handle that every later open shares (`_handle`)."""

    protocol = "lake"
    root_marker = ""

    def __init__(self, fs):
        super().__init__(fs)
        self._files: OrderedDict[str, FileInfo] = OrderedDict()
        self._handles: OrderedDict[str, pa.NativeFile] = OrderedDict()
        self._files_lock = threading.Lock()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        prefix = f"{cls.protocol}://"
        return (path[len(prefix):] if path.startswith(prefix) else path).rstrip("/")

    def _file_info(self, path: str) -> FileInfo:
        path = self._strip_protocol(path)
        with self._files_lock:
            known = self._files.get(path)
        if known is not None:
            return known
        info = self.fs.get_file_info(path)
        if info.type == FileType.File:  # a missing path or a prefix may change: never cached
            with self._files_lock:
                self._files[path] = info
                while len(self._files) > FILE_INFO_CACHE:
                    self._files.popitem(last=False)
        return info

    def info(self, path, **kwargs):
        return self._make_entry(self._file_info(path))

    def modified(self, path):
        return self._file_info(path).mtime

    def _open(self, path, mode="rb", block_size=None, seekable=True, **kwargs):
        if mode != "rb":
            return super()._open(path, mode, block_size, seekable, **kwargs)
        return _ReadAt(self._handle(path))

    def _handle(self, path: str) -> pa.NativeFile:
        """One random-access handle per data file, shared by every open: pyarrow sends a HEAD request for each
        `open_input_file`, and its `read_at` is thread-safe, so later opens cost nothing."""
        path = self._strip_protocol(path)
        with self._files_lock:
            handle = self._handles.get(path)
            if handle is not None:
                self._handles.move_to_end(path)
                return handle
        handle = self.fs.open_input_file(path)
        with self._files_lock:
            self._handles[path] = handle
            while len(self._handles) > OPEN_FILES:
                self._handles.popitem(last=False)  # an evicted handle still serves the reader that holds it
        return handle


class _Position(threading.local):
    pos = 0


class _ReadAt(io.RawIOBase):
    """A reader's own position over a shared pyarrow handle (lake.duck._StoreFS._handle), one position per thread.
    Why per thread: DuckDB shares one file handle among the threads scanning a file, and its Python filesystem reads
    at an offset as a `seek` then a `read`; another thread's `seek` in between (the GIL is free between them, or
    inside pyarrow's read) made the read return bytes of the wrong place: an intermittent "Out of buffer" or "don't
    know what type" from the Parquet decoder on large scans (docs/lake-design.md). A thread's seek and its read are
    always one thread's, so each thread's position is exact."""

    def __init__(self, handle: pa.NativeFile):
        super().__init__()
        self._handle, self.size = handle, handle.size()
        self._local = _Position()

    @property
    def _pos(self) -> int:
        return self._local.pos

    @_pos.setter
    def _pos(self, value: int) -> None:
        self._local.pos = value

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        pos = self._pos
        n = self.size - pos if n is None or n < 0 else min(n, self.size - pos)
        if n <= 0:
            return b""
        data = self._handle.read_at(n, pos)
        self._pos = pos + len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _ReadOnlyFS(_StoreFS):
    """A lake root as user SQL sees it: reads under `root_path` (the root's pyarrow path) and nothing else; every
    call that would create, change or delete a file raises PermissionError (DuckDB reports it as the query's
    error). Subclassed per database (`QueryDatabase`) with `protocol` and `root_path`."""

    root_path = "/"

    def _inside(self, path: str) -> str:
        path = self._strip_protocol(path)
        if path != self.root_path and not path.startswith(self.root_path.rstrip("/") + "/"):
            raise PermissionError(f"{path}: outside the lake; queries read only the lake's files")
        return path

    def _file_info(self, path: str) -> FileInfo:
        return super()._file_info(self._inside(path))

    def _open(self, path, mode="rb", block_size=None, seekable=True, **kwargs):
        if mode != "rb":
            raise PermissionError(f"{self._strip_protocol(path)}: the lake is read-only to queries")
        return super()._open(self._inside(path), mode, block_size, seekable, **kwargs)

    def ls(self, path, detail=False, **kwargs):
        return super().ls(self._inside(path), detail=detail, **kwargs)

    def _refuse(self, *args, **kwargs):
        raise PermissionError("the lake is read-only to queries")

    # every fsspec call that writes: DuckDB's bridge calls open(mode="wb"), rm, mkdir, rmdir, mv and touch
    mkdir = makedirs = rm = rm_file = _rm = rmdir = mv = cp_file = copy = touch = pipe_file = put_file = _refuse


def bound_memory(con: duckdb.DuckDBPyConnection, memory_mb: float | None) -> None:
    """Hold the queries of the database `con` belongs to within `memory_mb` MiB (None: DuckDB's default, 80% of the
    machine's memory): past it DuckDB spills sorts, joins and aggregates, and what cannot spill fails the query with
    an OutOfMemoryException. It spills into one folder per process under the system's temporary folder (DuckDB
    creates it at the first spill and removes its files when the database closes), not into the working folder,
    DuckDB's default (`.tmp`), which a server started anywhere would litter. Before any lock of the configuration."""
    if memory_mb is None:
        return
    con.execute("SET memory_limit = ?", [f"{int(memory_mb * 1024)}KiB"])
    con.execute("SET temp_directory = ?", [os.path.join(tempfile.gettempdir(), f"lachesis-duckdb-{os.getpid()}")])


class QueryDatabase:
    """A database of its own for one snapshot that runs user SQL: data files named through a `_ReadOnlyFS` of
    the lake root (`names`), then `lock()`: that filesystem is the only allowed directory, external access is
    off and the configuration is locked, so no later statement can reach another file or undo the settings.
    Costs a `duckdb.connect()` (~14 ms) per snapshot, and no Parquet footer cache shared with other snapshots.
    `memory_mb`: the most memory (MiB) its queries may hold (`bound_memory`)."""

    def __init__(self, store: Store, memory_mb: float | None = None):
        self.con = duckdb.connect()
        self.con.execute("SET parquet_metadata_cache = true")  # the footers read when the views bind, kept
        bound_memory(self.con, memory_mb)
        root = str(store.root)
        self.protocol = f"lakeq{hashlib.sha256(root.encode()).hexdigest()[:12]}"
        fs_class = type(f"ReadOnlyFS_{self.protocol}", (_ReadOnlyFS,), {"protocol": self.protocol,
                                                                        "root_path": to_fs_path(root)})
        self.con.register_filesystem(fs_class(store.fs))

    def names(self, uris: list[str]) -> list[str]:
        """The names under which this database reads `uris` (data files under the lake root)."""
        return [f"{self.protocol}://{to_fs_path(u)}" for u in uris]

    def lock(self) -> None:
        """From here on: only the lake's files, only read, and no setting can change (DuckDB refuses
        `SET enable_external_access = true` on a running database, and any SET after lock_configuration)."""
        self.con.execute("SET allowed_directories = ?", [[f"{self.protocol}://"]])
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")

    def close(self) -> None:
        self.con.close()


def _store_fs(store: Store, protocol: str) -> _StoreFS:
    return type(f"StoreFS_{protocol}", (_StoreFS,), {"protocol": protocol})(store.fs)


def file_names(store: Store, uris: list[str]) -> list[str]:
    """The names under which DuckDB reads `uris` (data files of `store`): local paths as they are; object-store
    URIs under the protocol registered for their root on the process's database."""
    if store.local:
        return list(uris)
    db = database()
    with _lock:
        root = str(store.root)
        protocol = _protocols.get(root)
        if protocol is None:
            protocol = _protocols[root] = f"lake{hashlib.sha256(root.encode()).hexdigest()[:12]}"
            db.register_filesystem(_store_fs(store, protocol))
    scheme = root.split("://", 1)[0] + "://"
    return [f"{protocol}://{u[len(scheme):]}" for u in uris]
