"""Registering the `views/*.sql` files on a DuckDB connection.

The lake's snapshot registers them itself; this is the same convention for connections the lake does not
make (a Hermes skills folder read straight from disk, tests on plain DuckDB): each `<name>.sql` holds one
SELECT and becomes view `<name>`; a view may use other views, so registration retries until no further view
resolves.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import duckdb

from views import VIEWS_DIR, list_views, view_sql


def register_views(con: duckdb.DuckDBPyConnection, views_dir: str | Path | None = None,
                   names: list[str] | None = None) -> dict[str, str]:
    """Create every view on `con`. Returns {name: error} for the views that could not be created."""
    d = Path(views_dir) if views_dir else VIEWS_DIR
    pending = {n: view_sql(n, d) for n in (names or list_views(d))}
    errors: dict[str, str] = {}
    while pending:
        progressed = False
        errors = {}
        for name, sql in list(pending.items()):
            try:
                con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
            except duckdb.Error as exc:
                errors[name] = str(exc)
                continue
            del pending[name]
            progressed = True
        if not progressed:
            break
    return errors


_IDENT = re.compile(r"\b[a-z_][a-z0-9_]*\b")


def view_dependencies(name: str, views_dir: str | Path | None = None) -> list[str]:
    """Views that `name` uses, transitively (by name occurrence in the SQL), sorted; excludes `name`."""
    d = Path(views_dir) if views_dir else VIEWS_DIR
    known = set(list_views(d))
    seen: set[str] = set()
    stack = [name]
    while stack:
        cur = stack.pop()
        sql = _strip_comments(view_sql(cur, d)).lower()
        for ident in set(_IDENT.findall(sql)) & known:
            if ident not in seen and ident != name:
                seen.add(ident)
                stack.append(ident)
    return sorted(seen)


def view_sql_hash(name: str, views_dir: str | Path | None = None) -> dict[str, str]:
    """sha256 of the view's SQL and of each view it depends on: {"sha256": combined, "files": {name: sha}}."""
    d = Path(views_dir) if views_dir else VIEWS_DIR
    files = {n: hashlib.sha256(view_sql(n, d).encode("utf-8")).hexdigest()
             for n in [name] + view_dependencies(name, d)}
    combined = hashlib.sha256("".join(f"{n}\0{h}\n" for n, h in sorted(files.items())).encode()).hexdigest()
    return {"sha256": combined, "files": dict(sorted(files.items()))}


def _strip_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)
