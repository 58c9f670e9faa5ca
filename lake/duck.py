"""One in-memory DuckDB database per process; each snapshot is a cursor on it with a schema of its own.

Why: `duckdb.connect()` costs ~14 ms, as much as the aggregate a snapshot is opened for (bench_lake), while a
cursor plus `CREATE SCHEMA` costs ~0.4 ms. Views bind names inside their own schema and `SET VARIABLE` is per
cursor, so snapshots on one database do not see each other's tables, views or variables. The database also
caches Parquet footers (`parquet_metadata_cache`), safe because a lake never rewrites a data file in place:
a snapshot opened after another reads no footer twice. The schema goes when its cursor is closed or
garbage-collected (a relation keeps its cursor alive, so `lake.snapshot().sql(q).fetchall()` is safe).
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref

import duckdb

_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_db_pid = -1
_names = itertools.count()


def database() -> duckdb.DuckDBPyConnection:
    """The process's database (a new one after a fork: DuckDB state must not cross processes)."""
    global _db, _db_pid
    with _lock:
        if _db is None or _db_pid != os.getpid():
            _db = duckdb.connect()
            _db.execute("SET GLOBAL parquet_metadata_cache = true")  # a config key at connect needs parquet loaded
            _db_pid = os.getpid()
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
