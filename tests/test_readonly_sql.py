"""User SQL cannot write the lake (issue 26, item 1): `lake sql` runs one SELECT, a `--where` filter is one
expression, and the snapshot they run on reaches only the lake's files, only for reading (lake/query.py,
lake.duck.QueryDatabase), on a local root and on the S3 emulator. The lake's own writes keep working."""
from __future__ import annotations

import hashlib
import json

import duckdb
import pyarrow.fs as pafs
import pytest
from typer.testing import CliRunner

from lachesis.cli import app
from lake import Lake
from lake.query import QueryError, check_filter, check_query
from lake.store import Store, to_fs_path
from tests.lake_helpers import trajectory
from views.export import ExportError, export_view

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(map(str, args)))


@pytest.fixture
def filled(any_lake_root):
    """A lake (local or s3) with 6 trajectories in two commits; returns its root."""
    lk = Lake.init(any_lake_root)
    lk.append("trajectories", [trajectory(i) for i in range(3)])
    lk.append("trajectories", [trajectory(i) for i in range(3, 6)])
    return any_lake_root


def lake_files(root: str) -> dict[str, tuple[int, object]]:
    """Every file under the root with its size and mtime: what a write would change."""
    store = Store(root)
    infos = store.fs.get_file_info(pafs.FileSelector(to_fs_path(root), recursive=True))
    return {i.path: (i.size, i.mtime) for i in infos if i.type == pafs.FileType.File}


def rows(root: str) -> int:
    return Lake.open(root).snapshot().sql("SELECT count(*) FROM trajectories").fetchall()[0][0]


def file_names(root: str) -> list[str]:
    """How an attacker names a lake path: as typed, and under each protocol the lake registers in DuckDB."""
    text = str(Store(root).root)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = to_fs_path(text)
    return [text, f"lake{digest}://{path}", f"lakeq{digest}://{path}"]


def one_line_refusal(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    return res.output


@pytest.mark.attack
def test_copy_forging_a_delta_log_entry_is_refused(filled):
    before = lake_files(filled)
    for name in file_names(filled):
        log = f"{name}/trajectories/_delta_log/00000000000000000003.json"
        query = ("COPY (SELECT '{\"remove\":{\"path\":\"x\",\"deletionTimestamp\":1,\"dataChange\":true}}' AS j) "
                 f"TO '{log}' (FORMAT csv, HEADER false, QUOTE '')")
        assert "read-only" in one_line_refusal(invoke("sql", query, "--lake", filled))
    assert lake_files(filled) == before and rows(filled) == 6


@pytest.mark.attack
def test_copy_partition_overwrite_of_a_table_folder_is_refused(filled):
    before = lake_files(filled)
    for name in file_names(filled):
        query = f"COPY (SELECT 1 AS a) TO '{name}/trajectories' (FORMAT parquet, PARTITION_BY (a), OVERWRITE)"
        one_line_refusal(invoke("sql", query, "--lake", filled))
    assert lake_files(filled) == before and rows(filled) == 6


@pytest.mark.attack
def test_a_second_statement_in_export_where_is_refused(filled, tmp_path):
    before = lake_files(filled)
    name = file_names(filled)[0]
    where = (f"true); COPY (SELECT 1 AS a) TO '{name}/trajectories' (FORMAT parquet, PARTITION_BY (a), "
             "OVERWRITE); SELECT * FROM trajectories WHERE (true")
    res = invoke("export", "trajectories", "--output", tmp_path / "out", "--where", where, "--lake", filled)
    assert "--where" in one_line_refusal(res) and "not one SQL expression" in res.output
    assert not (tmp_path / "out").exists()
    assert lake_files(filled) == before and rows(filled) == 6
    with pytest.raises(ExportError, match="not one SQL expression"):  # the library call refuses it too
        export_view(Lake.open(filled), "trajectories", tmp_path / "out2", where="1=1) OR (1=1")


@pytest.mark.attack
@pytest.mark.parametrize("query", [
    "SELECT 1; COPY (SELECT 1) TO '{tmp}/probe.csv'",
    "ATTACH ':memory:' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "CREATE TABLE trajectories_copy AS SELECT * FROM trajectories",
    "PRAGMA threads = 64",
    "EXPORT DATABASE '{tmp}/probe'",
])
def test_statements_that_are_not_one_read_are_refused(query, tmp_path):
    root = tmp_path / "lake"
    Lake.init(root).append("trajectories", [trajectory(0)])
    before = lake_files(str(root))
    res = invoke("sql", query.format(tmp=tmp_path), "--lake", root)
    assert "one SELECT" in one_line_refusal(res)
    assert lake_files(str(root)) == before and sorted(p.name for p in tmp_path.iterdir()) == ["lake"]


@pytest.mark.attack
def test_a_read_only_snapshot_writes_nothing_even_past_the_statement_check(filled, tmp_path):
    """The second fence alone: raw statements on the snapshot's own connection."""
    before = lake_files(filled)
    snap = Lake.open(filled).snapshot(read_only=True)
    for name in file_names(filled):
        for statement in (f"COPY (SELECT 1 AS a) TO '{name}/trajectories/x.parquet' (FORMAT parquet)",
                          f"COPY (SELECT 1 AS a) TO '{name}/trajectories' (FORMAT parquet, PARTITION_BY (a), "
                          "OVERWRITE)"):
            with pytest.raises(duckdb.Error):
                snap.con.execute(statement)
    for statement in ("SET enable_external_access = true", "SET lock_configuration = false",
                      "SET allowed_directories = ['/']", "SELECT * FROM read_text('/etc/hostname')",
                      f"ATTACH '{tmp_path}/probe.duckdb' AS x"):
        with pytest.raises(duckdb.Error):
            snap.con.execute(statement)
    assert snap.sql("SELECT count(*) FROM trajectories").fetchall() == [(6,)]
    snap.close()
    assert lake_files(filled) == before and not (tmp_path / "probe.duckdb").exists()


def test_reads_still_work_and_the_lake_still_writes(filled, tmp_path):
    for query in ("DESCRIBE trajectories", "WITH t AS (SELECT * FROM trajectories) SELECT count(*) AS n FROM t",
                  "FROM trajectories SELECT count(*) AS n", "EXPLAIN SELECT * FROM trajectories", "SELECT 1;"):
        res = invoke("sql", query, "--lake", filled, "--json")
        assert res.exit_code == 0, (query, res.output)
    res = invoke("export", "trajectories", "--output", tmp_path / "ok", "--where", "reward >= 0.3 -- a comment",
                 "--lake", filled, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["row_count"] == 3
    Lake.open(filled).append("trajectories", [trajectory(99)])  # the lake's own writes (delta-rs) unaffected
    assert rows(filled) == 7


@pytest.mark.attack
@pytest.mark.parametrize("text", ["1=1) OR (1=1", "true; DROP TABLE trajectories", "a = 1 ORDER BY a", "",
                                  "true) UNION ALL SELECT * FROM runs WHERE (true"])
def test_a_filter_is_exactly_one_expression(text):
    with pytest.raises(QueryError, match="--where"):
        check_filter(text)


def test_check_query_names_the_statement_kind():
    with pytest.raises(QueryError, match="not COPY"):
        check_query("COPY (SELECT 1) TO 'x.csv'")
    with pytest.raises(QueryError, match="2 statements"):
        check_query("SELECT 1; SELECT 2")
    assert check_query("SELECT 1") == "SELECT 1"
