"""Registering the `views/*.sql` files on a DuckDB connection, and the hash of a view's SQL for manifests.

The lake's snapshot registers them itself; this is the same registration (`lake.snapshot.register_views`) for
connections the lake does not make (a Hermes skills folder read straight from disk, tests on plain DuckDB):
each `<name>.sql` holds one SELECT and becomes view `<name>`, after the views it uses.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb

from lake.snapshot import read_views, view_closure
from lake.snapshot import register_views as register_view_sql
from views import VIEWS_DIR, view_sql


def register_views(con: duckdb.DuckDBPyConnection, views_dir: str | Path | None = None,
                   names: list[str] | None = None) -> dict[str, str]:
    """Create every view (or `names`) on `con`. Returns {name: error} for the views that could not be created."""
    sql = read_views(views_dir or VIEWS_DIR)
    _, errors = register_view_sql(con, {n: sql[n] for n in names} if names else sql)
    return errors


def view_dependencies(name: str, views_dir: str | Path | None = None) -> list[str]:
    """Views that `name` uses, transitively (as DuckDB's parser reads them; every view when it cannot), sorted;
    excludes `name`."""
    sql = read_views(views_dir or VIEWS_DIR)
    used = view_closure(f'SELECT * FROM "{name}"', sql)
    return sorted((set(sql) if used is None else used & set(sql)) - {name})


def view_sql_hash(name: str, views_dir: str | Path | None = None) -> dict[str, str]:
    """sha256 of the view's SQL and of each view it depends on: {"sha256": combined, "files": {name: sha}}."""
    d = Path(views_dir) if views_dir else VIEWS_DIR
    files = {n: hashlib.sha256(view_sql(n, d).encode("utf-8")).hexdigest()
             for n in [name] + view_dependencies(name, d)}
    combined = hashlib.sha256("".join(f"{n}\0{h}\n" for n, h in sorted(files.items())).encode()).hexdigest()
    return {"sha256": combined, "files": dict(sorted(files.items()))}
