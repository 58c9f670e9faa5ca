"""`LakeReader`: every query the UI and its read API run, one lake, read-only.

Each request reads one snapshot pinned at the versions it resolves (`as_of`, or its cursor's), opened the way
`lake sql` opens one for user SQL: `Lake.snapshot(versions, for_query=..., read_only=True)`, a database of its own
that reads only the lake's files, writes none and has its configuration locked (lake/query.py, lake/duck.py), so a
`where` filter that got past lake.query's expression check still cannot read a file outside the lake or write one.
The SQL is the files in ui/sql/; a query runs within `query_timeout` seconds (DuckDB has no statement timeout:
a timer interrupts the connection), so an expensive filter costs a worker that long at most.

What comes back is plain data: rows as dicts, JSON columns parsed (text that is not JSON stays text), times as
datetimes (orjson and the templates write them), and the versions every table was read at.
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

import duckdb
import orjson

from lake import Lake
from lake.errors import LakeError
from lake.maintenance import history
from lake.snapshot import Snapshot
from ui.config import QUERY_TIMEOUT_S
from ui.params import LIMIT_DEFAULT, Cursor, ParamError

WHERE_MARKER = "/* where */ TRUE"
PARAMETER = re.compile(r"\$[A-Za-z_]\w*")  # a named parameter of the SQL files
# columns holding JSON text (lake/schemas.py), parsed for the API and the pages
JSON_COLUMNS = frozenset({"overrides", "metadata", "raw", "config", "metrics", "manifest", "labels"})
RECENT_ERRORS = 20
RECENT_RUNS = 10


class QueryTimeout(RuntimeError):
    """A query ran past the reader's time limit and was interrupted."""


@functools.cache
def sql_text(name: str) -> str:
    """The text of ui/sql/<name>.sql (shipped as package data)."""
    return (resources.files("ui") / "sql" / f"{name}.sql").read_text(encoding="utf-8")


def with_where(sql: str, where: str | None) -> str:
    """`sql` with its `where` marker replaced by the checked filter (ui.params.where), or left TRUE."""
    if sql.count(WHERE_MARKER) != 1:
        raise AssertionError("a query takes a where filter at exactly one marker")
    return sql.replace(WHERE_MARKER, f"({where})" if where else "TRUE")


def parse_json_columns(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its JSON text columns as values (text that does not parse, or nests past orjson's bound, stays
    text: a value is shown as it was written, never dropped)."""
    for name in JSON_COLUMNS & row.keys():
        value = row[name]
        if isinstance(value, str):
            try:
                row[name] = orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
    return row


class LakeReader:
    """The UI's queries on the lake at `root` (opened at the first request: `lake serve` creates its lake first)."""

    def __init__(self, root: str | Path, query_timeout: float = QUERY_TIMEOUT_S):
        self.root = root
        self.query_timeout = query_timeout
        self._lake: Lake | None = None
        self._lock = threading.Lock()

    @property
    def lake(self) -> Lake:
        with self._lock:
            if self._lake is None:
                self._lake = Lake.open(self.root)
            return self._lake

    # -- pins and snapshots --------------------------------------------------------------------------------------
    def resolve(self, as_of: Any = None, cursor: Cursor | None = None) -> dict[str, int]:
        """The version of every table a request reads: its cursor's (the pin of the first page), else `as_of`'s
        (a parsed pin: ui.params.as_of). A pin beyond the lake's versions is a ParamError on the parameter."""
        param, pin = ("cursor", cursor.versions) if cursor is not None else ("as_of", as_of)
        try:
            versions = self.lake.resolve_versions(pin)
        except LakeError as exc:
            raise ParamError(param, str(exc)) from None
        if cursor is not None and as_of is not None and self._resolve_quietly(as_of) != versions:
            raise ParamError("cursor", "it was given at other versions than this as_of (start again without it)")
        return versions

    def _resolve_quietly(self, as_of: Any) -> dict[str, int] | None:
        try:
            return self.lake.resolve_versions(as_of)
        except LakeError:
            return None

    @contextlib.contextmanager
    def snapshot(self, versions: dict[str, int], for_query: str) -> Iterator[Snapshot]:
        """A read-only snapshot at `versions` with the tables and views `for_query` reads, closed after use.
        DuckDB cannot list the tables of a text with `$name` parameters (the snapshot would then register every
        view: 0.8 s instead of 0.05), so they are read as NULLs for that."""
        snap = self.lake.snapshot(versions, for_query=PARAMETER.sub("NULL", for_query), read_only=True)
        try:
            yield snap
        finally:
            snap.close()

    def rows(self, snap: Snapshot, sql: str, params: dict[str, Any], *, where: str | None = None) -> list[dict]:
        """The rows of `sql` on `snap` as dicts, within the time limit. A DuckDB error is the `where` filter's when
        there is one (a ParamError: an unknown column, a file outside the lake); QueryTimeout past the limit."""
        timer = threading.Timer(self.query_timeout, snap.con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            rel = snap.sql(sql, params)
            columns = list(rel.columns)
            data = rel.fetchall()
        except duckdb.InterruptException:
            raise QueryTimeout(f"the query ran past {self.query_timeout:g} s and was stopped") from None
        except duckdb.Error as exc:
            if where is None:
                raise
            raise ParamError("where", _first_line(exc)) from None
        finally:
            timer.cancel()
        return [parse_json_columns(dict(zip(columns, r))) for r in data]

    # -- what the routes ask ---------------------------------------------------------------------------------------
    def trajectories(self, q: dict[str, Any]) -> dict[str, Any]:
        """A page of the trajectory list for the parsed parameters `q` (ui.params.TRAJECTORY_LIST): its rows, the
        versions read and the cursor of the next page (None on the last)."""
        cur: Cursor | None = q.get("cursor")
        versions = self.resolve(q.get("as_of"), cur)
        order = cur.order if cur is not None else (q.get("order") or "newest")
        if cur is not None and q.get("order") not in (None, cur.order):
            raise ParamError("order", f"the cursor pages in {cur.order} order")
        limit = q.get("limit") or LIMIT_DEFAULT
        sql = with_where(sql_text("trajectory_list"), q.get("where"))
        params = {name: q.get(name) for name in ("env", "split", "task", "success", "min_reward", "max_reward",
                                                 "policy_version", "source", "since", "until")}
        params.update(newest=order == "newest", limit=limit + 1, after_us=cur.after_us if cur else None,
                      after_event=cur.after_event if cur else None)
        with self.snapshot(versions, sql) as snap:
            rows = self.rows(snap, sql, params, where=q.get("where"))
        more = len(rows) > limit
        rows = rows[:limit]
        nxt = Cursor(versions, rows[-1]["ingested_us"], rows[-1]["event_id"], order).encode() if more else None
        for r in rows:
            del r["ingested_us"]  # the cursor's business
        return {"rows": rows, "versions": versions, "order": order, "next_cursor": nxt}

    def trajectory(self, trajectory_id: str, as_of: Any = None) -> tuple[dict[str, Any] | None, dict[str, int]]:
        """(the current row of `trajectory_id`, every column, or None; the versions read)."""
        versions = self.resolve(as_of)
        sql = sql_text("trajectory_one")
        with self.snapshot(versions, sql) as snap:
            rows = self.rows(snap, sql, {"trajectory_id": trajectory_id})
        row = rows[0] if rows else None
        if row is not None:
            del row["ingested_us"]
        return row, versions

    def runs(self, q: dict[str, Any]) -> dict[str, Any]:
        """A page of the runs table's rows, newest first (ui.params.RUN_LIST), as `trajectories` pages."""
        cur: Cursor | None = q.get("cursor")
        versions = self.resolve(q.get("as_of"), cur)
        order = cur.order if cur is not None else (q.get("order") or "newest")
        limit = q.get("limit") or LIMIT_DEFAULT
        sql = sql_text("run_list")
        params = {"kind": q.get("kind"), "run_id": q.get("run_id"), "newest": order == "newest", "limit": limit + 1,
                  "after_us": cur.after_us if cur else None, "after_event": cur.after_event if cur else None}
        with self.snapshot(versions, sql) as snap:
            rows = self.rows(snap, sql, params)
        more = len(rows) > limit
        rows = rows[:limit]
        nxt = Cursor(versions, rows[-1]["ingested_us"], rows[-1]["event_id"], order).encode() if more else None
        for r in rows:
            del r["ingested_us"]
        return {"rows": rows, "versions": versions, "order": order, "next_cursor": nxt}

    def loop(self, as_of: Any = None) -> dict[str, Any]:
        """Success rate and mean reward by policy_version (ui/sql/loop.sql), at one pin."""
        versions = self.resolve(as_of)
        sql = sql_text("loop")
        with self.snapshot(versions, sql) as snap:
            rows = self.rows(snap, sql, {})
        return {"rows": rows, "versions": versions}

    def versions(self, limit: int | None = None) -> dict[str, Any]:
        """Every table's latest version and its newest commits (version, time, operation, rows added): what an
        `as_of` can pin (lake.maintenance.history, as `lake log` reads it)."""
        lake = self.lake
        out = {}
        for table in lake.tables():
            commits = history(lake.table_set, table, limit or LIMIT_DEFAULT)
            out[table] = {"version": lake.version(table),
                          "commits": [{k: v for k, v in c.items() if k != "table"} for c in commits]}
        return {"tables": out}

    def overview(self, as_of: Any = None) -> dict[str, Any]:
        """Each table's version and rows, the newest ingest errors and the newest runs' rows, at one pin."""
        versions = self.resolve(as_of)
        counts_sql, errors_sql = sql_text("table_rows"), sql_text("recent_errors")
        with self.snapshot(versions, counts_sql) as snap:  # it reads every table: the others' queries need no more
            counts = {r["table"]: r["rows"] for r in self.rows(snap, counts_sql, {})}
            errors = self.rows(snap, errors_sql, {"limit": RECENT_ERRORS})
        runs = self.runs({"as_of": versions, "limit": RECENT_RUNS})["rows"]
        tables = [{"table": t, "version": v, "rows": counts.get(t)} for t, v in versions.items()]
        return {"versions": versions, "tables": tables, "errors": errors, "runs": runs}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
