"""Materialise a view on a pinned lake snapshot into a dataset folder with a lineage manifest.

A dataset folder holds parquet (or jsonl) files named the way `datasets.load_dataset("parquet", data_dir=...)`
infers splits from (`train-00000-of-00001.parquet`, `test-...`; all rows are `train-...` for views without a
`split` column: any other name makes `datasets` read manifest.json as data) plus `manifest.json`: the lake version of every table, the hash of the view's SQL (and of the views it
uses), the row count, and the hash of the event ids behind the rows. The same lake version gives
byte-identical files and the same manifest: rows are sorted by the view's declared order, the writer
settings are fixed, and the manifest holds no clock time and no absolute path.

This is the export core: the snapshot, the view's rows in order, the parquet and jsonl files and the manifest.
The Hugging Face `datasets` format is a front above it (export_hf.py: `export_view_hf`, which stages the rows
through this module as parquet); nothing here imports it, so `lake export` in parquet or jsonl never loads
`datasets`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ground.atomic import folder_atomically
from ground.digest import file_sha256
from ground.errors import UserError
from lake import Lake
from lake.output_folder import check_output_folder
from lake.as_of import MANIFEST_NAME, AsOf
from lake.query import QueryError, ident, literal, where_clause
from lake.snapshot import Snapshot
from views import list_views, view_order
from views.registry import view_sql_hash

MANIFEST_VERSION = 1
FILE_FORMATS = ("parquet", "jsonl")  # written here (`lake export --format` also takes hf: views/export_config.py)

# Fixed writer settings: part of the manifest, so a change shows up as a different dataset.
PARQUET_SETTINGS = {
    "compression": "zstd",
    "compression_level": 3,
    "row_group_size": 50_000,
    "data_page_size": 1 << 20,
    "use_dictionary": True,
    "write_statistics": True,
    "version": "2.6",
}
ROWS_PER_FILE = 500_000
# File name prefixes `datasets` maps to splits; a `split` column with other values is not used for file names.
SPLIT_NAMES = {"train", "test", "validation"}

_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ExportError(UserError, RuntimeError):
    """A user-facing export failure (bad view name, bad --where, refused output folder)."""


class UnknownViewError(ExportError):
    def __init__(self, view: str, available: list[str]):
        self.view = view
        self.available = available
        super().__init__(f"unknown view {view!r}; available views: {', '.join(available) or '(none)'}")


def available_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    # current_schema(): a lake snapshot's views live in its own schema of a database shared with other snapshots
    rows = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = current_schema() "
                       "ORDER BY view_name").fetchall()
    return [r[0] for r in rows if not r[0].startswith("__")]


def set_variables(con: duckdb.DuckDBPyConnection, variables: Mapping[str, Any] | None) -> dict[str, Any]:
    """SET VARIABLE for each item; returns the variables as recorded in a manifest."""
    out: dict[str, Any] = {}
    for name, value in sorted((variables or {}).items()):
        if not _VAR_NAME.match(name):
            raise ExportError(f"bad variable name {name!r}: use letters, digits and _")
        value = _coerce(value)
        con.execute(f"SET VARIABLE {name} = ?", [value])
        out[name] = value
    return out


def _coerce(value: Any) -> Any:
    """'0.8' -> 0.8, '5' -> 5, 'true' -> True; anything else unchanged (CLI values arrive as text)."""
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


class EmptyExportError(ExportError):
    """The view has no rows on this snapshot (and the caller did not allow an empty dataset)."""

    exit_code = 1  # not a usage error: the command was right, the data is not there


def export_view(lake: Lake, view: str, output: str | os.PathLike, *, format: str = "parquet", as_of: AsOf = None,
                where: str | None = None, overwrite: bool = False, variables: Mapping[str, Any] | None = None,
                rows_per_file: int = ROWS_PER_FILE, allow_empty: bool = True) -> dict:
    """Export `view` of a snapshot of `lake` at `as_of` (any spelling of lake.as_of) into the folder `output` as
    parquet or jsonl; returns the manifest (also written as manifest.json). Raises ExportError, or LakeError for a
    bad as-of."""
    with view_snapshot(lake, view, as_of, where) as snap:
        return export_snapshot(snap, view, output, format=format, where=where, overwrite=overwrite,
                               variables=variables, rows_per_file=rows_per_file, allow_empty=allow_empty)


@contextlib.contextmanager
def view_snapshot(lake: Lake, view: str, as_of: AsOf = None, where: str | None = None):
    """A read-only snapshot of `lake` at `as_of` on which `view` binds (an export's); ExportError when the view is
    unknown, does not bind, or `where` is not one expression."""
    known = sorted(set(list_views(lake.views_dir)) | set(lake.tables()))
    if view not in known:
        raise UnknownViewError(view, known)
    try:
        query = f"SELECT * FROM {ident(view)}{where_clause(where)}"
    except QueryError as exc:
        raise ExportError(str(exc)) from None
    with lake.snapshot(as_of, for_query=query, read_only=True) as snap:  # a filter reads, never writes
        err = snap.view_errors.get(view)
        if err and view not in available_views(snap.con):
            raise ExportError(f"view {view!r} does not bind on this lake: {err.splitlines()[0]}")
        yield snap


def query_view(con: duckdb.DuckDBPyConnection, view: str, where: str | None = None,
               views_dir: str | os.PathLike | None = None) -> pa.Table:
    """The view's rows (after --where) in their deterministic order, as Arrow (JSON columns as arrow.json)."""
    views = available_views(con)
    if view not in views:
        raise UnknownViewError(view, views)
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {ident(view)}").fetchall()
    except duckdb.Error as exc:
        raise ExportError(f"view {view!r} failed: {exc}") from None
    cols = [r[0] for r in described]
    json_cols = {r[0] for r in described if r[1] == "JSON"}
    order = _order_columns(view, cols, views_dir)
    try:
        sql = f"SELECT * FROM {ident(view)}{where_clause(where)}"  # the filter: one expression (lake.query)
    except QueryError as exc:
        raise ExportError(str(exc)) from None
    if order:
        sql += " ORDER BY " + ", ".join(f"{ident(c)} NULLS FIRST" for c in order)
    else:
        sql += " ORDER BY ALL"
    try:
        table = con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        if where:
            raise ExportError(f"--where {where!r} failed: {exc}") from None
        raise ExportError(f"view {view!r} failed: {exc}") from None
    return _mark_json(table, json_cols)


def _mark_json(table: pa.Table, json_cols: set[str]) -> pa.Table:
    """Top-level JSON columns as Arrow's json extension type, so `datasets` decodes them (Json feature)."""
    for i, f in enumerate(table.schema):
        if f.name in json_cols and pa.types.is_string(f.type):
            col = table.column(i).combine_chunks()
            table = table.set_column(i, pa.field(f.name, pa.json_()), pa.ExtensionArray.from_storage(pa.json_(), col))
    return table


def _order_columns(view: str, cols: list[str], views_dir: str | os.PathLike | None) -> list[str]:
    try:
        declared = view_order(view, views_dir)
    except OSError:
        declared = []
    order = [c for c in declared if c in cols]
    for extra in ("event_id",):
        if extra in cols and extra not in order:
            order.append(extra)
    return order


def export_snapshot(snap: Snapshot, view: str, output: str | os.PathLike, *, format: str = "parquet",
                    where: str | None = None, overwrite: bool = False, variables: Mapping[str, Any] | None = None,
                    rows_per_file: int = ROWS_PER_FILE, allow_empty: bool = True) -> dict:
    """Export `view` of an open snapshot (see export_view); nothing is written when it raises."""
    check_outside_lake(snap, Path(output))
    if format not in FILE_FORMATS:
        hint = " (hf: views.export_hf.export_view_hf)" if format == "hf" else ""
        raise ExportError(f"unknown format {format!r}; use one of: {', '.join(FILE_FORMATS)}{hint}")
    con, versions, views_dir = snap.con, snap.versions, snap.views_dir
    out = Path(output)
    replaced = _check_output(out, overwrite)
    recorded_vars = set_variables(con, variables)
    table = query_view(con, view, where, views_dir)
    if table.num_rows == 0 and not allow_empty:
        pins = ", ".join(f"{t}@{v}" for t, v in sorted(versions.items()))
        raise EmptyExportError(f"view {view!r} has 0 rows{f' where {where}' if where else ''} at lake versions "
                               f"{pins}: nothing written (--allow-empty writes an empty dataset)")
    event_hash, event_count = _event_ids_hash(con, table)

    with folder_atomically(out, in_place_of=replaced) as tmp:  # an existing output folder stays, its old dataset goes
        files = _write_files(con, table, tmp, format, rows_per_file)
        writer = _writer_info(format)
        writer["rows_per_file"] = rows_per_file
        try:
            sql_hash = view_sql_hash(view, views_dir)
        except OSError:  # a view the lake has but this folder does not define
            sql_hash = {"sha256": None, "files": {}}
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "view": view,
            "format": format,
            "lake_versions": {k: int(v) for k, v in sorted(versions.items())},
            "view_sql_sha256": sql_hash["sha256"],
            "view_sql_files": sql_hash["files"],
            "where": where or None,
            "variables": recorded_vars,
            "row_count": table.num_rows,
            "splits": _split_counts(table),
            "event_ids_sha256": event_hash,
            "event_id_count": event_count,
            "columns": [{"name": f.name, "type": str(f.type)} for f in table.schema],
            "files": files,
            "writer": writer,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return manifest


def check_outside_lake(snap: Snapshot, out: Path) -> None:
    """An export folder never lies inside the lake of `snap` nor any other (--overwrite there could delete the lake's
    data files), nor where nothing can be written: lake/output_folder.py's rules, `lake export-model`'s too."""
    store = snap.table_set.store
    check_output_folder(out, lakes=[store.root] if store.local else [], error=ExportError)


def _check_output(out: Path, overwrite: bool) -> list[Path]:
    """The files --overwrite will replace: those the folder's manifest.json (a previous export) lists, and
    the manifest itself; an error when anything else is in the folder, so nothing else is ever deleted."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"output {out} exists and is not a folder")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if entries and not overwrite:
        raise ExportError(f"output folder {out} is not empty; pass --overwrite to replace its dataset")
    if not entries:
        return []
    listed = _manifest_files(out)
    if listed is None:
        raise ExportError(f"refusing to overwrite {out}: no manifest.json of a previous export lists its files "
                          f"({', '.join(p.name for p in entries[:5])}), so they are not part of a dataset export; "
                          "choose an empty or new folder")
    stray = [p.name for p in entries if p.name not in listed or not p.is_file()]
    if stray:
        raise ExportError(f"refusing to overwrite {out}: it holds files that are not part of a dataset export "
                          f"(its manifest.json does not list {', '.join(stray[:5])}); choose an empty or new folder")
    return entries


def _manifest_files(out: Path) -> set[str] | None:
    """Names a previous export's manifest.json lists (with itself), or None when there is no such manifest."""
    try:
        manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
        names = {f["path"] for f in manifest["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(n, str) and n == Path(n).name for n in names):
        return None  # a manifest naming paths outside its folder is none of ours
    return names | {MANIFEST_NAME}


def _split_counts(table: pa.Table) -> dict[str, int] | None:
    if "split" not in table.column_names:
        return None
    counts: dict[str, int] = {}
    for v in table.column("split").to_pylist():
        counts[str(v)] = counts.get(str(v), 0) + 1
    return dict(sorted(counts.items()))


def _event_id_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if (f.name == "event_id" or f.name.endswith("_event_id"))
            and pa.types.is_string(f.type)]


def _event_ids_hash(con: duckdb.DuckDBPyConnection, table: pa.Table) -> tuple[str, int]:
    """sha256 of the sorted distinct event ids behind the rows (every *event_id column), and their count."""
    cols = _event_id_columns(table.schema)
    if not cols:
        return hashlib.sha256(b"").hexdigest(), 0
    ids = pa.table({c: table.column(c) for c in cols})
    con.register("__export_event_ids", ids)
    try:
        union = " UNION ".join(f"SELECT {ident(c)} AS e FROM __export_event_ids WHERE {ident(c)} IS NOT NULL"
                               for c in cols)
        row = con.execute(f"SELECT count(*), coalesce(string_agg(e, chr(10) ORDER BY e), '') FROM ({union})").fetchall()[0]
    finally:
        con.unregister("__export_event_ids")
    return hashlib.sha256(row[1].encode("utf-8")).hexdigest(), int(row[0])


def _groups(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """(file prefix, rows) per split; everything is 'train' without a usable split column (a name without a
    split keyword makes `datasets` take every file in the folder, manifest.json included)."""
    if "split" not in table.column_names:
        return [("train", table)]
    if table.num_rows == 0:
        return [("train", table)]
    values = sorted({v for v in table.column("split").to_pylist()}, key=str)
    if not set(values) <= SPLIT_NAMES:  # e.g. an env's split column with nulls: one file set, no split names
        return [("train", table)]
    groups = []
    for v in values:
        mask = pc.equal(pc.cast(table.column("split"), pa.string()), v)
        name = re.sub(r"[^A-Za-z0-9_.]+", "_", v) or "none"
        groups.append((name, table.filter(mask)))
    return groups


def _write_files(con: duckdb.DuckDBPyConnection, table: pa.Table, folder: Path, fmt: str,
                 rows_per_file: int) -> list[dict]:
    files = []
    for prefix, rows in _groups(table):
        n = max(1, -(-rows.num_rows // rows_per_file))
        for i in range(n):
            part = rows.slice(i * rows_per_file, rows_per_file)
            name = f"{prefix}-{i:05d}-of-{n:05d}.{fmt}"
            path = folder / name
            if fmt == "parquet":
                _write_parquet(part, path)
            else:
                _write_jsonl(part, path)
            files.append({"path": name, "rows": part.num_rows, "sha256": file_sha256(path)})
    return files


def _write_parquet(table: pa.Table, path: Path) -> None:
    s = PARQUET_SETTINGS
    pq.write_table(table.combine_chunks(), path, compression=s["compression"],
                   compression_level=s["compression_level"], row_group_size=s["row_group_size"],
                   data_page_size=s["data_page_size"], use_dictionary=s["use_dictionary"],
                   write_statistics=s["write_statistics"], version=s["version"])


def _write_jsonl(table: pa.Table, path: Path) -> None:
    """One JSON object per line, keys in column order; JSON-typed columns embedded as JSON values; timestamps
    in UTC. Written by DuckDB (4x faster than json.dumps per row) on its own connection pinned to UTC."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("__jsonl_rows", table)
        con.execute(f"COPY (SELECT * FROM __jsonl_rows) TO {literal(str(path))} (FORMAT json)")
    finally:
        con.close()


def _writer_info(fmt: str) -> dict:
    info: dict[str, Any] = {"duckdb": duckdb.__version__, "pyarrow": pa.__version__}
    if fmt == "parquet":
        info["parquet"] = dict(PARQUET_SETTINGS)
    return info
