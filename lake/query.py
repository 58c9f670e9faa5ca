"""User SQL against the lake: what `lake sql` may run and what a `--where` filter may be.

Why: the lake is a system of record, and a query tool must not be able to rewrite its history. DuckDB's COPY
writes any file it can reach: `COPY (...) TO '<lake>/trajectories/_delta_log/...json'` forged a Delta remove
action (6 rows -> 0), `COPY ... (PARTITION_BY ..., OVERWRITE)` deleted every data and log file, and a filter
`true); COPY ...; SELECT * FROM t WHERE (true` ran a second statement inside `lake export --where`.

Two fences, each enough alone:
- the text: a query is exactly one SELECT (or EXPLAIN of one); a filter is exactly one expression, parsed by
  DuckDB's own parser (`duckdb.SQLExpression`) and put back into the query as DuckDB prints it, so it cannot
  close a parenthesis or start a statement of its own;
- the database: user SQL runs on a snapshot whose files are reached only through a read-only filesystem, with
  external access off and the configuration locked (lake.duck.QueryDatabase, `Lake.snapshot(read_only=True)`).

Reading is allowed everywhere inside the lake (the Delta log included: the user can read those files anyway);
reading files outside it, and writing anything, is not.
"""
from __future__ import annotations

import duckdb

from lake.errors import LakeError

# Statements a query may be: SELECT covers FROM-first, VALUES, WITH, DESCRIBE, SUMMARIZE and SHOW. PIVOT is a
# MULTI statement (it creates an enum type first) and PRAGMA, CALL and SET change or run things: refused.
READ_STATEMENTS = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


class QueryError(LakeError):
    """User SQL the lake refuses to run: more than one statement, one that is not a read, or a bad filter."""


def check_query(sql: str) -> str:
    """`sql` when it is exactly one read statement; else a one-line QueryError naming what it is."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_first_line(exc)) from None
    if len(statements) != 1:
        raise QueryError(f"a query is one SELECT statement; this text holds {len(statements)} statements")
    kind = statements[0].type
    if kind not in READ_STATEMENTS:
        raise QueryError(f"a query is read-only: one SELECT (or EXPLAIN) statement, not {kind.name} "
                         "(COPY, ATTACH, INSTALL, LOAD, SET, CREATE, PRAGMA and CALL are refused)")
    return sql


def check_filter(expr: str, option: str = "--where") -> str:
    """A filter as one SQL expression, returned as DuckDB prints it back (so it stays inside the `WHERE (...)`
    it is put in); a QueryError naming `option` when it is not exactly one expression."""
    try:
        parsed = duckdb.SQLExpression(expr)
    except duckdb.Error as exc:
        raise QueryError(f"{option} {expr!r} is not one SQL expression: {_first_line(exc)}") from None
    text = str(parsed)
    check_query(f"SELECT 1 WHERE ({text})")  # defence in depth: still one SELECT once wrapped
    return text


def where_clause(where: str | None) -> str:
    """` WHERE (<the filter>)` for a query, or "" without one (None or blank)."""
    if where is None or not where.strip():
        return ""
    return f" WHERE ({check_filter(where)})"


def ident(name: str) -> str:
    """A table, view or column name as a quoted SQL identifier (a `"` in it doubled)."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """`value` as an SQL string literal (a `'` in it doubled): for text DuckDB takes no parameter in (a file list of
    read_parquet, a COPY target) or a filter written for a user to read; values of a query go in as parameters."""
    return "'" + str(value).replace("'", "''") + "'"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
