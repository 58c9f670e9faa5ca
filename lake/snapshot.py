"""A pinned, read-only view of the lake in DuckDB (a cursor with a schema of its own, lake/duck.py).

Each table is a view over the data files of its pinned Delta version (the snapshot's file list, never a
glob: a glob sees duplicates during compaction), on a local disk or object storage (lake/duck.py). Then every `views/*.sql` file becomes a view; a file holds
one SELECT and its name is the view's name.

A snapshot for user SQL (`read_only=True`: `lake sql`, export filters) lives on a database of its own whose
files are reachable only for reading, locked once the tables and views are registered (lake/duck.py,
lake/query.py): the lake's own temp views are the last thing created there.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import duckdb
import pyarrow as pa

from lake import duck
from lake.as_of import AsOf, parse_as_of
from lake.query import check_query, ident, literal
from lake.schemas import table_schema
from lake.tables import TableSet, TableState


class ViewError(RuntimeError):
    pass


def referenced_names(sql: str) -> set[str] | None:
    """Tables and views a query reads, or None when DuckDB cannot tell (then everything is registered)."""
    try:
        return {n.split(".")[-1] for n in duckdb.get_table_names(sql)}
    except duckdb.Error:
        return None


class Snapshot:
    """Tables pinned at `as_of` (any spelling of lake.as_of) as DuckDB views, plus the views/*.sql views.

    `for_query`: register only the tables and views that query reads (transitively), and read only their
    Delta logs. `versions` still lists every table: the others are pinned when it is first read.
    `refresh()` advances the registered tables to their latest versions, reading only the new commits:
    a long-lived process keeps one snapshot and refreshes it instead of opening a new one.
    `read_only`: for user SQL, on a locked database that can only read the lake's files (not refreshable), whose
    queries hold at most `memory_mb` MiB (lake.duck.QueryDatabase; None: DuckDB's default).
    """

    def __init__(self, table_set: TableSet, as_of: AsOf = None, views_dir: str | os.PathLike | None = None,
                 for_query: str | None = None, read_only: bool = False, memory_mb: float | None = None):
        self.table_set = table_set
        self.views_dir = Path(views_dir) if views_dir else None
        self._as_of = parse_as_of(as_of)
        view_sql = read_views(self.views_dir)
        needed = view_closure(for_query, view_sql) if for_query else None
        tables = [t for t in table_set.tables() if needed is None or t in needed]
        self._versions = table_set.resolve_versions(self._as_of, tables)
        self._query_db = duck.QueryDatabase(table_set.store, memory_mb) if read_only else None
        if self._query_db is not None:
            self.con, self._drop_schema = self._query_db.con, self._query_db.close
        else:
            self.con, self._drop_schema = duck.session()
        self.files: dict[str, list[str]] = {}
        for table in tables:
            self._register_table(table_set.state(table, self._versions[table]))
        if needed is not None:
            view_sql = {k: v for k, v in view_sql.items() if k in needed}
        self.views, self.view_errors = register_views(self.con, view_sql)
        if self._query_db is not None:
            self._query_db.lock()

    @property
    def versions(self) -> dict[str, int]:
        """The pinned version of every table of the lake."""
        rest = [t for t in self.table_set.tables() if t not in self._versions]
        if rest:
            self._versions.update(self.table_set.resolve_versions(self._as_of, rest))
        return dict(self._versions)

    def refresh(self) -> dict[str, int]:
        """Advance every registered table to its latest version; returns {table: version} of those that moved.
        Views over them need nothing: DuckDB binds a view's SQL at each query."""
        if self._query_db is not None:
            raise ViewError("a read-only snapshot is locked to its files: open a new one to see later versions")
        moved = {}
        for table in list(self.files):
            state = self.table_set.state(table)
            if state.version != self._versions[table]:
                self._register_table(state)
                self._versions[table] = moved[table] = state.version
        for table in [t for t in self._versions if t not in self.files]:
            del self._versions[table]  # unread tables are pinned again when `versions` is read
        return moved

    def _register_table(self, state: TableState) -> None:
        table, files = state.table, list(state.files)
        self.files[table] = files
        # The code's schema, then columns a newer writer merged into this version's Delta schema. A column the
        # code knows but no file of this version holds yet (schema evolution) is read as a typed NULL.
        schema = table_schema(table)
        delta_fields = {f.name: f for f in state.schema}
        fields = [delta_fields.get(f.name, f) for f in schema] + [
            f for name, f in delta_fields.items() if name not in schema.names]
        if not files:
            self.con.register(f"__empty_{table}", pa.schema(fields).empty_table())
            self.con.execute(f"CREATE OR REPLACE VIEW {ident(table)} AS SELECT * FROM {ident('__empty_' + table)}")
            return
        # union_by_name makes DuckDB read every file's schema at each query; it is needed only when some file
        # lacks a column another has (written before the schema grew). `day` comes from the path.
        per_file = self.table_set.file_columns(files)
        present = frozenset().union(*per_file) | {"day"}
        union = ", union_by_name=true" if any(cols != per_file[0] for cols in per_file) else ""
        if self._query_db is not None:  # user SQL: every file through the read-only bridge
            names = self._query_db.names(files)
        else:  # object storage: through lake.duck's bridge
            names = duck.file_names(self.table_set.store, files)
        source = (f"read_parquet([{', '.join(literal(f) for f in names)}], hive_partitioning=true, "
                  f"hive_types_autocast=false{union})")
        cols = []
        for field in fields:
            if field.name in present:
                cols.append(ident(field.name))  # a column a writer merged into the Delta schema: any text
            else:
                duck_type = self.con.from_arrow(pa.schema([field]).empty_table()).types[0]
                cols.append(f"CAST(NULL AS {duck_type}) AS {ident(field.name)}")
        self.con.execute(f"CREATE OR REPLACE VIEW {ident(table)} AS SELECT {', '.join(cols)} FROM {source}")

    def table_files(self, table: str) -> list[str]:
        if table not in self.files:
            return list(self.table_set.state(table, self.versions[table]).files)
        return self.files[table]

    def sql(self, query: str, params: Sequence[object] | None = None) -> duckdb.DuckDBPyRelation:
        """One read statement, its `?` bound to `params`. Checked on every snapshot (lake.query.check_query):
        DuckDB's `sql` runs every statement of a text, so a value pasted into a query could append a COPY."""
        return self.con.sql(check_query(query), params=params)

    def arrow(self, query: str, params: Sequence[object] | None = None) -> pa.Table:
        rel = self.sql(query, params)
        return rel.to_arrow_table() if rel is not None else pa.table({})

    def close(self) -> None:
        self.con.close()
        self._drop_schema()

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_views(views_dir: str | os.PathLike | None) -> dict[str, str]:
    """{view name: SELECT} of every `*.sql` file in `views_dir` ({} without one)."""
    if not views_dir or not Path(views_dir).is_dir():
        return {}
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(Path(views_dir).glob("*.sql"))}


def register_views(con: duckdb.DuckDBPyConnection, view_sql: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Create the views on `con` in dependency order (each binds once); returns (created, {name: error}) where a
    view that fails (bad SQL, or a column this lake lacks) is recorded and skipped."""
    done: list[str] = []
    errors: dict[str, str] = {}
    pending = _dependency_order(view_sql)
    while pending:  # a second pass only when DuckDB could not list some view's dependencies
        failed = []
        for name in pending:
            try:
                con.execute(f"CREATE OR REPLACE VIEW {ident(name)} AS {view_sql[name].strip().rstrip(';')}")
            except duckdb.Error as exc:
                errors[name] = str(exc)
                failed.append(name)
                continue
            errors.pop(name, None)
            done.append(name)
        if len(failed) == len(pending):
            break
        pending = failed
    return done, errors


def view_closure(query: str, view_sql: dict[str, str]) -> set[str] | None:
    """The tables and views `query` reads, transitively through `view_sql`; None when DuckDB cannot tell."""
    todo = referenced_names(query)
    if todo is None:
        return None
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in view_sql:
            deps = referenced_names(view_sql[name].strip().rstrip(";"))
            if deps is None:
                return None
            todo |= deps - seen
    return seen


def _dependency_order(view_sql: dict[str, str]) -> list[str]:
    """Views sorted so each comes after the views it reads; cycles and unparsable SQL keep name order."""
    deps = {}
    for name, sql in view_sql.items():
        refs = referenced_names(sql.strip().rstrip(";")) or set()
        deps[name] = {r for r in refs if r in view_sql and r != name}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        if state.get(name) == 2 or state.get(name) == 1:  # done, or a cycle: let DuckDB report it
            return
        state[name] = 1
        for d in sorted(deps[name]):
            visit(d)
        state[name] = 2
        order.append(name)

    for name in sorted(view_sql):
        visit(name)
    return order
