"""`lake` commands of the lake core: init, tables, append, sql, log, compact, vacuum, consumers."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lachesis.console import AsOfOption, JsonOption, LakeOption, console, fail, literal, print_json, print_rows, rows_to_csv


def init(lake: Optional[Path] = LakeOption, json: bool = JsonOption) -> None:
    """Create a lake (every table, empty) at the lake root; safe to run again."""
    from lake import Lake

    lk = Lake.init(lake)
    info = {"root": str(lk.root), "tables": {t: lk.version(t) for t in lk.tables()}}
    if json:
        print_json(info)
    else:
        console.print(f"lake ready at [bold]{literal(lk.root)}[/] with tables: {literal(', '.join(info['tables']))}")


def tables(lake: Optional[Path] = LakeOption, json: bool = JsonOption) -> None:
    """List tables with their latest version, row count and data files."""
    from lake import open_lake
    from lake.query import ident

    lk = open_lake(lake)
    with lk.snapshot() as snap:
        rows = []
        for t in lk.tables():
            count = snap.sql(f"SELECT count(*) FROM {ident(t)}").fetchall()[0][0]
            rows.append({"table": t, "version": snap.versions[t], "rows": count, "files": len(snap.files[t])})
    print_json(rows) if json else print_rows(rows, title=f"lake {lk.root}")


def append(
    table: str = typer.Argument(..., help="Table to append to (e.g. trajectories, skills)."),
    file: Path = typer.Argument(..., help="JSON Lines file of native records, one per line.", exists=False),
    lake: Optional[Path] = LakeOption,
    writer_id: Optional[str] = typer.Option(None, help="Stable writer id, for idempotent retries with --seq."),
    seq: Optional[int] = typer.Option(None, help="Batch sequence of this writer; a replayed sequence adds nothing."),
    json: bool = JsonOption,
) -> None:
    """Append every record of FILE as one commit, or nothing if any line is bad. A trajectory whose trajectory_id
    is already in the lake (or earlier in FILE) is a duplicate, skipped and counted, as POST and `lake import` do."""
    from ingest.dedupe import trajectory_guard
    from lake import RecordError, open_lake
    from ground.jsonl import JsonlError, read_jsonl

    lk = open_lake(lake)
    if table not in lk.tables():
        fail(f"unknown table '{table}'; tables: {', '.join(lk.tables())}")
    if table == "trajectories":  # one dedupe rule for every way in (ingest.dedupe: checked at commit time)
        trajectory_guard(lk)
    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        records, lines = read_jsonl(file)
        if not records:
            fail(f"{file}: no records")
        result = lk.append(table, records, writer_id=writer_id, seq=seq)
    except JsonlError as exc:
        fail(f"{exc}; nothing was written")
    except RecordError as exc:
        fail(f"{file}:{lines[exc.index]}: field '{exc.field}': {exc.message}; nothing was written")
    info = {"table": table, "rows": result.rows, "duplicates": result.skipped,
            "version": result.version, "duplicate": result.duplicate, "writer_id": writer_id, "seq": result.seq}
    if json:
        print_json(info)
    elif result.duplicate:
        console.print(f"batch {seq} of writer {literal(writer_id)} is already committed: nothing written")
    else:
        skipped = f", {result.skipped} duplicate trajectory_id(s) skipped" if result.skipped else ""
        console.print(f"appended {result.rows} rows to {literal(table)} (version {result.version})"
                      f"{skipped}")


def sql(
    query: str = typer.Argument(..., help="One DuckDB SELECT over the tables and views of the lake (read-only: "
                                          "no COPY, ATTACH, INSTALL, SET, CREATE; files outside the lake unread)."),
    lake: Optional[Path] = LakeOption,
    as_of: Optional[str] = AsOfOption,
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
    limit: int = typer.Option(1000, help="Most rows printed as a table (json/csv print all)."),
    json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Run one read-only SQL query (a SELECT) on a snapshot of the lake (the latest, or --as-of a version)."""
    import duckdb

    from lake import open_lake
    from lake.query import check_query

    if fmt not in ("table", "json", "csv"):
        fail(f"--format must be table, json or csv, not {fmt!r}")
    if json and fmt == "csv":
        fail("--json and --format csv disagree: give one")
    fmt = "json" if json else fmt
    lk = open_lake(lake)
    try:
        snap = lk.snapshot(as_of, for_query=check_query(query), read_only=True)
        rel = snap.sql(query)
    except duckdb.Error as exc:
        fail(str(exc).strip(), code=1)
    if rel is None:
        return
    try:
        columns = list(rel.columns)
        data = [dict(zip(columns, r)) for r in rel.fetchall()]
    except duckdb.Error as exc:
        fail(str(exc).strip(), code=1)
    if fmt == "json":
        print_json(data)
    elif fmt == "csv":
        typer.echo(rows_to_csv(data, columns), nl=False)
    else:
        print_rows(data[:limit], columns=columns)
        if len(data) > limit:
            console.print(f"[dim]{len(data) - limit} more rows not shown (--limit, or --format json)[/]")


def log(
    table: Optional[str] = typer.Argument(None, help="One table; default all."),
    lake: Optional[Path] = LakeOption,
    limit: Optional[int] = typer.Option(20, help="Most recent commits per table."),
    json: bool = JsonOption,
) -> None:
    """Commit history: version, time, operation, rows and files added."""
    from lake import open_lake
    from lake.maintenance import history

    lk = open_lake(lake)
    names = [table] if table else lk.tables()
    if table and table not in lk.tables():
        fail(f"unknown table '{table}'; tables: {', '.join(lk.tables())}")
    rows = [r for t in names for r in history(lk.table_set, t, limit)]
    print_json(rows) if json else print_rows(rows, title="lake log")


def compact(
    table: Optional[str] = typer.Argument(None, help="One table; default all."),
    day: Optional[str] = typer.Option(None, help="Only this day partition (YYYY-MM-DD)."),
    lake: Optional[Path] = LakeOption,
    json: bool = JsonOption,
) -> None:
    """Merge small files of each day partition (readers and consumers are unaffected)."""
    from lake import open_lake
    from lake.maintenance import compact as do_compact

    lk = open_lake(lake)
    rows = [do_compact(lk.table_set, t, day) for t in ([table] if table else lk.tables())]
    print_json(rows) if json else print_rows(rows, title="compaction")


def vacuum(
    table: Optional[str] = typer.Argument(None, help="One table; default all."),
    retention_hours: int = typer.Option(
        168, "--retention-hours", "--retain", min=0,
        help="Keep replaced files younger than this many hours (default 168 = 7 days), so `--as-of` older versions "
             "and readers still on them work; 0 deletes every replaced file no registered consumer needs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be deleted."),
    lake: Optional[Path] = LakeOption,
    json: bool = JsonOption,
) -> None:
    """Delete files compaction replaced, except those registered consumers still need."""
    from lake import open_lake
    from lake.maintenance import vacuum as do_vacuum

    lk = open_lake(lake)
    rows = [do_vacuum(lk.table_set, t, retention_hours, dry_run) for t in ([table] if table else lk.tables())]
    if json:
        print_json(rows)
    else:
        print_rows([{k: v for k, v in r.items() if k != "files"} for r in rows], title="vacuum")
        young = sum(r["kept_for_retention"] for r in rows)
        if young:  # why a vacuum deleted less than compaction replaced
            console.print(literal(f"{young} replaced file(s) are younger than --retention-hours {retention_hours} and "
                                  "were kept (time travel with --as-of); --retention-hours 0 deletes them"),
                          highlight=False, soft_wrap=True)


def consumers(lake: Optional[Path] = LakeOption, json: bool = JsonOption) -> None:
    """Registered consumers, their offset per table and how many versions they lag."""
    from lake import open_lake

    lk = open_lake(lake)
    rows = []
    for name, offsets in lk.consumers().items():
        for t, v in offsets.items():
            rows.append({"consumer": name, "table": t, "offset": v, "latest": lk.version(t), "lag": lk.version(t) - v})
    print_json(rows) if json else print_rows(rows, title="consumers", columns=["consumer", "table", "offset", "latest", "lag"])


def register(app: typer.Typer) -> None:
    for fn in (init, tables, append, sql, log, compact, vacuum, consumers):
        app.command(fn.__name__)(fn)
