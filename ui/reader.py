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

import collections
import contextlib
import functools
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb
import orjson
import pyarrow as pa

from lake import Lake
from lake.duck import bound_memory
from lake.errors import LakeError
from lake.maintenance import history
from lake.query import ident
from lake.snapshot import Snapshot
from ui.config import QUERY_TIMEOUT_S
from ui.params import LIMIT_DEFAULT, Cursor, ParamError

WHERE_MARKER = "/* where */ TRUE"
PARAMETER = re.compile(r"\$[A-Za-z_]\w*")  # a named parameter of the SQL files
# columns holding JSON text (lake/schemas.py), parsed for the API and the pages
JSON_COLUMNS = frozenset({"overrides", "metadata", "raw", "config", "metrics", "manifest", "labels"})
RECENT_ERRORS = 20
RECENT_RUNS = 10
LOOP_MARKS = 500  # training events marked on the loop's chart
INDEX_TIMEOUT_S = 600.0  # building a trajectory index (our query, bounded by the lake, not a client's filter)
INDEX_CACHE = 2  # trajectory indexes held (each ~150 bytes a trajectory: ~150 MB for 1M): the latest and one pin
KEPT = 16  # answers kept by `kept` (the skills page's, by pin and filters)
RUN_EPISODES = 200  # evaluation episodes listed on a run's page
VIEW_ROWS = 20  # first rows of a view on its page
SKILL_ROWS = 500  # skills (and skill_effect rows) on the skills page
# what the skills page reads: the skills, their usage and effect, and skill_to_instruction's views
SKILL_TABLES = ("SELECT 1 FROM skills_current, skill_stats, skill_effect, instruction_candidates, instruction, "
                "instruction_funnel")


class QueryLimit(RuntimeError):
    """A query went past one of the reader's limits and was stopped: the answer is an error page, not a 500."""


class QueryTimeout(QueryLimit):
    """A query ran past the reader's time limit and was interrupted."""


class QueryMemory(QueryLimit):
    """A query needed more memory than the reader's bound (`lake ui --query-memory-mb`) and could not spill."""


@functools.cache
def sql_text(name: str) -> str:
    """The text of ui/sql/<name>.sql (shipped as package data)."""
    return (resources.files("ui") / "sql" / f"{name}.sql").read_text(encoding="utf-8")


def with_where(sql: str, where: str | None) -> str:
    """`sql` with its `where` marker replaced by the checked filter (ui.params.where), or left TRUE."""
    return put(sql, WHERE_MARKER, f"({where})" if where else "TRUE")


def put(sql: str, marker: str, text: str) -> str:
    """`sql` with its one `marker` replaced by `text` (a query of ui/sql, a checked filter: never a client's)."""
    if sql.count(marker) != 1:
        raise AssertionError(f"a query takes {marker!r} at exactly one place")
    return sql.replace(marker, text)


def rows_sql() -> str:
    """ui/sql/trajectory_rows.sql as a subquery (every current trajectory, every column, derived ones added)."""
    return f"({sql_text('trajectory_rows')})"


class IndexDb:
    """A query database over one trajectory index (an in-memory DuckDB of its own holding only that Arrow table as
    `trajectory_index`): what LakeReader.rows runs the list's and the loop's queries on when they need no more."""

    def __init__(self, table: pa.Table, memory_mb: float | None = None):
        self.con = duckdb.connect(":memory:")
        bound_memory(self.con, memory_mb)  # as a snapshot's (lake.duck.QueryDatabase)
        self.con.register("trajectory_index", table)

    def sql(self, query: str, params: dict[str, Any] | None = None) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query, params=params)

    def close(self) -> None:
        self.con.close()


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

    def __init__(self, root: str | Path, query_timeout: float = QUERY_TIMEOUT_S, memory_mb: float | None = None):
        self.root = root
        self.query_timeout = query_timeout
        self.memory_mb = memory_mb  # each snapshot's queries (lake.duck.QueryDatabase); None: DuckDB's default
        self._lake: Lake | None = None
        self._lock = threading.Lock()
        self._indexes: collections.OrderedDict[tuple[int, int], pa.Table] = collections.OrderedDict()
        self._index_lock = threading.Lock()  # one build at a time: concurrent requests wait for it, not redo it
        self._kept: collections.OrderedDict[tuple, dict[str, Any]] = collections.OrderedDict()
        self._kept_lock = threading.Lock()

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
        snap = self.lake.snapshot(versions, for_query=PARAMETER.sub("NULL", for_query), read_only=True,
                                  memory_mb=self.memory_mb)
        try:
            yield snap
        finally:
            snap.close()

    @contextlib.contextmanager
    def limited(self, snap: Snapshot | IndexDb, seconds: float | None = None) -> Iterator[None]:
        """What runs inside is interrupted after the time limit (`seconds`, else the reader's query_timeout):
        QueryTimeout (DuckDB has no statement timeout); past the memory bound, QueryMemory."""
        seconds = self.query_timeout if seconds is None else seconds
        timer = threading.Timer(seconds, snap.con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            yield
        except duckdb.InterruptException:
            raise QueryTimeout(f"the query ran past {seconds:g} s and was stopped") from None
        except duckdb.OutOfMemoryException:
            bound = "DuckDB's memory limit" if self.memory_mb is None else f"{self.memory_mb:g} MiB"
            raise QueryMemory(f"the query needed more than {bound} and was stopped") from None
        finally:
            timer.cancel()

    def rows(self, snap: Snapshot | IndexDb, sql: str, params: dict[str, Any], *,
             where: str | None = None, seconds: float | None = None) -> list[dict]:
        """The rows of `sql` on `snap` (a snapshot, or a trajectory index's database) as dicts, within the time limit. A DuckDB error is the `where` filter's when
        there is one (a ParamError: an unknown column, a file outside the lake); QueryTimeout past the limit."""
        try:
            with self.limited(snap, seconds):
                rel = snap.sql(sql, params)
                columns = list(rel.columns)
                data = rel.fetchall()
        except duckdb.Error as exc:
            if where is None or isinstance(exc, (duckdb.InterruptException, duckdb.OutOfMemoryException)):
                raise
            raise ParamError("where", _first_line(exc)) from None
        return [parse_json_columns(dict(zip(columns, r))) for r in data]

    # -- the trajectory index ------------------------------------------------------------------------------------
    def index(self, versions: dict[str, int]) -> pa.Table:
        """The trajectory index (ui/sql/trajectory_index.sql) at `versions`: built on a snapshot the first time
        these versions of trajectories and rewards (all it reads) are asked, then kept (the INDEX_CACHE newest
        asked), so the list and the loop answer from memory instead of reading every current row again. A pinned
        version never changes, so a kept index is exact; a new commit is a new index at its first request."""
        key = (versions["trajectories"], versions["rewards"])
        with self._index_lock:
            table = self._indexes.get(key)
            if table is None:
                sql = put(sql_text("trajectory_index"), "/* rows */ trajectory_rows", rows_sql())
                with self.snapshot(versions, sql) as snap, self.limited(snap, INDEX_TIMEOUT_S):
                    table = snap.sql(sql).to_arrow_table()
                self._indexes[key] = table
                while len(self._indexes) > INDEX_CACHE:
                    self._indexes.popitem(last=False)
            self._indexes.move_to_end(key)
            return table

    @contextlib.contextmanager
    def index_db(self, versions: dict[str, int]) -> Iterator[IndexDb]:
        db = IndexDb(self.index(versions), self.memory_mb)
        try:
            yield db
        finally:
            db.close()

    # -- what the routes ask ---------------------------------------------------------------------------------------
    def trajectories(self, q: dict[str, Any]) -> dict[str, Any]:
        """A page of the trajectory list for the parsed parameters `q` (ui.params.TRAJECTORY_LIST): its rows, the
        versions read and the cursor of the next page (None on the last)."""
        cur: Cursor | None = q.get("cursor")
        versions = self.resolve(q.get("as_of"), cur)
        order = cur.order if cur is not None else (q.get("order") or "newest")
        by = cur.sort if cur is not None else (q.get("sort") or "ingested")
        if cur is not None and q.get("order") not in (None, cur.order):
            raise ParamError("order", f"the cursor pages in {cur.order} order")
        if cur is not None and q.get("sort") not in (None, cur.sort):
            raise ParamError("sort", f"the cursor pages sorted by {cur.sort}")
        limit = q.get("limit") or LIMIT_DEFAULT
        where = q.get("where")
        sql = with_where(sql_text("trajectory_list"), where)
        ascending = order == "oldest"  # the direction and the cursor's comparison: ours, never a client's text
        sql = sql.replace("/* dir */ DESC", "ASC" if ascending else "DESC").replace("/* after */ <",
                                                                                  ">" if ascending else "<")
        if where:  # a filter may name any column: the whole rows, on a snapshot
            sql = put(sql, "/* source */ trajectory_index", rows_sql())
        params = {name: q.get(name) for name in ("env", "split", "task", "success", "min_reward", "max_reward",
                                                 "policy_version", "source", "since", "until")}
        params.update(sort=by, limit=limit + 1, after_us=cur.after_us if cur else None,
                      after_event=cur.after_event if cur else None, after_has=cur.has if cur else None,
                      after_num=cur.num if cur else None, after_text=cur.text if cur else None)
        if where:
            with self.snapshot(versions, sql) as snap:
                rows = self.rows(snap, sql, params, where=where)
        else:
            with self.index_db(versions) as db:
                rows = self.rows(db, sql, params)
        more = len(rows) > limit
        rows = rows[:limit]
        last = rows[-1] if more else None
        nxt = Cursor(versions, last["ingested_us"], last["event_id"], order, by, last["sort_has"], last["sort_num"],
                     last["sort_text"]).encode() if last else None
        for r in rows:
            for key in ("ingested_us", "sort_has", "sort_num", "sort_text"):
                del r[key]  # the cursor's business
        return {"rows": rows, "versions": versions, "order": order, "sort": by, "next_cursor": nxt}

    def trajectory(self, trajectory_id: str, as_of: Any = None) -> tuple[dict[str, Any] | None, dict[str, int]]:
        """(the current row of `trajectory_id`, every column, or None; the versions read)."""
        from views import view_sql

        versions = self.resolve(as_of)
        view = view_sql("trajectories_current", self.lake.views_dir).strip().rstrip(";")
        sql = put(sql_text("trajectory_one"), "/* trajectories_current */", view)
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

    def run(self, run_id: str, as_of: Any = None) -> dict[str, Any]:
        """One run as the lake records it, at one pin: `events` (ui/sql/run_events.sql; empty: no such run), its
        `related` runs (run_family.sql: the same streaming trainer's increments, the evaluations naming it or its
        weights), the evaluation `episodes` (run_episodes.sql, at most RUN_EPISODES, `episodes_total` in all) and
        what was `served` from its weights (run_served.sql); the `versions` read."""
        versions = self.resolve(as_of)
        with self.snapshot(versions, sql_text("run_family")) as snap:
            events = self.rows(snap, sql_text("run_events"), {"run_id": run_id})
            if not events:
                return {"events": [], "related": [], "episodes": [], "episodes_total": 0, "served": [],
                        "versions": versions}
            meta = [e["metadata"] if isinstance(e["metadata"], dict) else {} for e in events]
            serial = next((m["serial"] for m in meta if isinstance(m.get("serial"), str)), None)
            adapters = sorted({e["adapter_path"] for e in events if e["adapter_path"]})
            related = self.rows(snap, sql_text("run_family"), {"run_id": run_id, "serial": serial,
                                                                "adapters": adapters})
            family = events + [r for r in related if r["relation"] == "increment"]
            adapters = sorted({r["adapter_path"] for r in family if r["adapter_path"]})
            if serial is not None:  # the watcher's evaluations are of each increment's weights
                related = self.rows(snap, sql_text("run_family"), {"run_id": run_id, "serial": serial,
                                                                    "adapters": adapters})
        evals = [run_id] * any(e["kind"] == "eval" for e in events) + [
            r["run_id"] for r in related if r["relation"] == "evaluation"]
        shas = sorted({m.get("adapter_sha256") for m in meta + [r["metadata"] for r in family[len(events):]
                                                                if isinstance(r["metadata"], dict)]
                       if isinstance(m.get("adapter_sha256"), str)})
        episodes, served = [], []
        if evals or shas:
            with self.index_db(versions) as db:
                if evals:
                    episodes = self.rows(db, sql_text("run_episodes"), {"eval_ids": evals, "limit": RUN_EPISODES})
                if shas:
                    served = self.rows(db, sql_text("run_served"), {"shas": shas})
        total = episodes[0]["total"] if episodes else 0
        for e in episodes:
            del e["total"]
        return {"events": events, "related": related, "episodes": episodes, "episodes_total": total,
                "served": served, "versions": versions}

    def skills(self, as_of: Any = None, min_uses: int | None = None, provenance: str | None = None) -> dict[str, Any]:
        """The skills page at one pin: the current `skills` with their usage (ui/sql/skills.sql), the `effect`
        rows (the skill_effect view), and `selection`, what `skill_to_instruction --lake` would pick with these
        filters (views.skills.instruction_from_connection, its own selection on this snapshot: `candidates`, the
        `funnel` and `why_none`); `filters` as applied. A bad filter is a ParamError (views/instruction_config.py
        checks it, as for the command)."""
        from views.instruction_config import InstructionInputError, SkillToInstructionConfig
        from views.skills import instruction_from_connection, keep_skill_uses

        try:
            cfg = SkillToInstructionConfig(lake=Path("."), min_uses=5 if min_uses is None else min_uses,
                                           provenance=provenance or "agent")
        except InstructionInputError as exc:
            raise ParamError("provenance" if "provenance" in str(exc) else "min_uses", str(exc)) from None
        versions = self.resolve(as_of)

        def build() -> dict[str, Any]:
            with self.snapshot(versions, SKILL_TABLES) as snap:
                with self.limited(snap, INDEX_TIMEOUT_S):
                    keep_skill_uses(snap.con)  # once for the effect table and the selection (they all read it)
                skills = self.rows(snap, sql_text("skills"), {"limit": SKILL_ROWS}, seconds=INDEX_TIMEOUT_S)
                effect = self.rows(snap, sql_text("skill_effect"), {"limit": SKILL_ROWS}, seconds=INDEX_TIMEOUT_S)
                with self.limited(snap, INDEX_TIMEOUT_S):
                    result = instruction_from_connection(snap.con, min_uses=cfg.min_uses, provenance=cfg.provenance)
            return {"skills": skills, "effect": effect,
                    "selection": {"candidates": result.candidates, "funnel": result.funnel,
                                  "why_none": result.why_none(cfg.min_uses)},
                    "filters": {"min_uses": cfg.min_uses, "provenance": cfg.provenance}, "versions": versions}

        return self.kept(("skills", tuple(sorted(versions.items())), cfg.min_uses, cfg.provenance), build)

    def kept(self, key: tuple, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """`build()`'s answer for `key` (a pin and the parameters), computed once and kept (the KEPT newest): a
        page whose views read every trajectory (the skills page: skill_uses reads every message) costs that once per
        pin, then nothing. Exact: a pin never changes. Built under INDEX_TIMEOUT_S, not a client's query limit
        (our queries; bounded by the lake). Answers are small (at most SKILL_ROWS rows a table)."""
        with self._kept_lock:
            got = self._kept.get(key)
            if got is None:
                got = self._kept[key] = build()
                while len(self._kept) > KEPT:
                    self._kept.popitem(last=False)
            self._kept.move_to_end(key)
            return got

    def views(self) -> list[dict[str, Any]]:
        """Every view of the lake's views folder (views/*.sql), as `lake views` lists them: name, kind (dataset,
        or a helper other views read) and the first sentence of its comment. Reads no rows."""
        from views import HELPER_VIEWS, list_views, view_description

        folder = self.lake.views_dir
        return [{"view": name, "kind": "helper" if name in HELPER_VIEWS else "dataset",
                 "description": view_description(name, folder)} for name in list_views(folder)]

    def view(self, name: str, as_of: Any = None, limit: int | None = None) -> dict[str, Any] | None:
        """The rows the view `name` yields at one pin: `rows` (the first `limit`, VIEW_ROWS by default, in its
        declared order), `total`, `columns`, `error` (why it does not bind on this lake, if so); None for a name
        that is no view of views/*.sql."""
        from views import list_views, view_order
        from views.export import available_views

        folder = self.lake.views_dir
        if name not in list_views(folder):
            return None
        versions = self.resolve(as_of)
        order = view_order(name, folder)
        sql = (sql_text("view_rows").replace("/* view */ NULL", ident(name))
               .replace("/* order */", f"ORDER BY {', '.join(map(ident, order))}" if order else ""))
        with self.snapshot(versions, f"SELECT * FROM {ident(name)}") as snap:
            error = snap.view_errors.get(name)
            if error and name not in available_views(snap.con):
                return {"view": name, "rows": [], "total": 0, "columns": [], "versions": versions,
                        "error": _first_line(Exception(error))}
            rows = self.rows(snap, sql, {"limit": limit or VIEW_ROWS})
        total = rows[0]["_total"] if rows else 0
        for r in rows:
            del r["_total"]
        return {"view": name, "rows": rows, "total": total, "columns": list(rows[0]) if rows else [],
                "versions": versions, "error": None}

    def loop(self, as_of: Any = None) -> dict[str, Any]:
        """Success rate and mean reward by policy_version (ui/sql/loop.sql), the same `split` into evaluations,
        served calls and the rest (ui/sql/loop_split.sql), and the training events that mark where new weights
        appeared (`increments`: ui/sql/loop_marks.sql, at most LOOP_MARKS), at one pin."""
        versions = self.resolve(as_of)
        with self.index_db(versions) as db:
            rows = self.rows(db, sql_text("loop"), {})
            split = self.rows(db, sql_text("loop_split"), {})
        with self.snapshot(versions, sql_text("loop_marks")) as snap:
            marks = self.rows(snap, sql_text("loop_marks"), {"limit": LOOP_MARKS})
        return {"rows": rows, "split": split, "increments": marks, "versions": versions}

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
