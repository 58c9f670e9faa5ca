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
"""
from __future__ import annotations

import hashlib
import io
import itertools
import os
import threading
import weakref

from collections import OrderedDict

import duckdb
import pyarrow as pa
from fsspec.implementations.arrow import ArrowFSWrapper
from pyarrow.fs import FileInfo, FileType

from lake.store import Store

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
    (a snapshot with the views/*.sql views made ~40 of them per data file: 1.6 s against moto). A lake never
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


class _ReadAt(io.RawIOBase):
    """A reader's own position over a shared pyarrow handle (lake.duck._StoreFS._handle)."""

    def __init__(self, handle: pa.NativeFile):
        super().__init__()
        self._handle, self._pos, self.size = handle, 0, handle.size()

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
        n = self.size - self._pos if n is None or n < 0 else min(n, self.size - self._pos)
        if n <= 0:
            return b""
        data = self._handle.read_at(n, self._pos)
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


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
