"""Exports pinned to lake versions: byte-identical repeats, manifests, --as-of, splits, datasets/TRL loading,
and the CLI's answers to bad input."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lake import Lake
from tests.views_helpers import new_lake, read_manifest, seeded_trajectories
from views.export import ExportError, UnknownViewError, export_view

runner = CliRunner()


def data_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in (".parquet", ".jsonl")}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    lk = new_lake(root / "lake")
    lk.append("trajectories", seeded_trajectories(400, seed=5, n_tasks=80))
    v1 = lk.version("trajectories")
    lk.append("trajectories", seeded_trajectories(200, seed=6, n_tasks=120, start=400))
    lk.v1 = v1
    return lk


@pytest.fixture(scope="module")
def first(lake, tmp_path_factory):
    """Two exports of the sft view at the first version."""
    root = tmp_path_factory.mktemp("first")
    a = export_view(lake, "sft", root / "a", as_of=lake.v1)
    b = export_view(lake, "sft", root / "b", as_of=lake.v1)
    return root, a, b


def test_same_version_gives_identical_files_and_manifest(first):
    root, a, b = first
    assert a == b
    assert read_manifest(root / "a") == read_manifest(root / "b") == a
    assert (root / "a" / "manifest.json").read_bytes() == (root / "b" / "manifest.json").read_bytes()
    fa, fb = data_files(root / "a"), data_files(root / "b")
    assert fa == fb and set(fa) == {"train-00000-of-00001.parquet", "test-00000-of-00001.parquet"}
    for f in a["files"]:
        assert hashlib.sha256(fa[f["path"]]).hexdigest() == f["sha256"]
    assert a["row_count"] == sum(f["rows"] for f in a["files"]) == sum(a["splits"].values())


def test_later_version_changes_manifest_and_as_of_reproduces(lake, first, tmp_path):
    root, a, _ = first
    latest = export_view(lake, "sft", tmp_path / "latest")
    assert latest["row_count"] > a["row_count"]
    assert latest["lake_versions"]["trajectories"] > a["lake_versions"]["trajectories"]
    assert latest["event_ids_sha256"] != a["event_ids_sha256"]
    assert latest != a
    # --as-of the earlier version, or the earlier manifest itself, reproduces the earlier dataset
    again = export_view(lake, "sft", tmp_path / "again", as_of=a["lake_versions"])
    assert again == a and data_files(tmp_path / "again") == data_files(root / "a")
    via_manifest = export_view(lake, "sft", tmp_path / "via", as_of=str(root / "a" / "manifest.json"))
    assert via_manifest == a


def _task_splits(folder: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    out = {}
    for p in sorted(folder.glob("*.parquet")):
        for r in pq.read_table(p, columns=["task_id", "split"]).to_pylist():
            assert out.setdefault(r["task_id"], r["split"]) == r["split"], f"{r['task_id']} in both splits"
            assert p.name.startswith(r["split"] + "-")
    return out


def test_split_stable_across_versions_and_disjoint(lake, first, tmp_path):
    root, _, _ = first
    early = _task_splits(root / "a")
    export_view(lake, "sft", tmp_path / "late")
    late = _task_splits(tmp_path / "late")
    assert set(early) < set(late)
    assert all(late[t] == s for t, s in early.items())
    assert {"train", "test"} == set(late.values())


def test_loads_with_datasets_and_trl(first):
    import datasets

    root, a, _ = first
    ds = datasets.load_dataset("parquet", data_dir=str(root / "a"))
    assert set(ds) == {"train", "test"}
    assert ds["train"].num_rows == a["splits"]["train"] and ds["test"].num_rows == a["splits"]["test"]
    row = ds["train"][0]
    assert row["messages"][0]["role"] == "system"
    assert any(m["tool_calls"] for m in row["messages"] if m["role"] == "assistant")
    call = next(m for m in row["messages"] if m["tool_calls"])["tool_calls"][0]
    assert call["type"] == "function" and isinstance(json.loads(call["function"]["arguments"]), dict)
    from trl.data_utils import is_conversational

    assert is_conversational(row)


def test_jsonl_export_matches_parquet_rows(lake, first, tmp_path):
    import pyarrow.parquet as pq

    root, a, _ = first
    m1 = export_view(lake, "sft", tmp_path / "j1", format="jsonl", as_of=lake.v1)
    m2 = export_view(lake, "sft", tmp_path / "j2", format="jsonl", as_of=lake.v1)
    assert m1 == m2 and data_files(tmp_path / "j1") == data_files(tmp_path / "j2")
    assert m1["event_ids_sha256"] == a["event_ids_sha256"] and m1["row_count"] == a["row_count"]
    lines = (tmp_path / "j1" / "train-00000-of-00001.jsonl").read_text().splitlines()
    pq_rows = pq.read_table(root / "a" / "train-00000-of-00001.parquet").to_pylist()
    assert [json.loads(x)["sample_hash"] for x in lines] == [r["sample_hash"] for r in pq_rows]
    assert json.loads(lines[0])["messages"] == pq_rows[0]["messages"]
    import datasets

    ds = datasets.load_dataset("json", data_dir=str(tmp_path / "j1"))  # manifest.json is not taken as data
    assert {k: v.num_rows for k, v in ds.items()} == a["splits"]


def test_where_and_variables_are_applied_and_recorded(lake, tmp_path):
    m = export_view(lake, "sft", tmp_path / "w", where="task_id < 'task-010'",
                    variables={"sft_min_reward": "0.9", "sft_use_success": "false"})
    assert m["where"] == "task_id < 'task-010'"
    assert m["variables"] == {"sft_min_reward": 0.9, "sft_use_success": False}
    import pyarrow.parquet as pq

    rows = [r for p in (tmp_path / "w").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert rows and all(r["task_id"] < "task-010" and r["reward"] >= 0.9 for r in rows)


def test_other_views_export(lake, tmp_path):
    m = export_view(lake, "dpo", tmp_path / "dpo")
    assert m["row_count"] > 0 and m["event_id_count"] >= 2 * m["row_count"] - 0  # chosen and rejected ids
    assert m["view_sql_files"].keys() == {"dpo", "trajectory_chats", "trajectories_current"}
    cur = export_view(lake, "trajectories_current", tmp_path / "cur")  # env split column is null: no split files
    assert [f["path"] for f in cur["files"]] == ["train-00000-of-00001.parquet"] and cur["row_count"] == 600
    empty = export_view(lake, "replay", tmp_path / "replay")  # no steps in these trajectories
    assert empty["row_count"] == 0 and [f["path"] for f in empty["files"]] == ["train-00000-of-00001.parquet"]
    import datasets

    ds = datasets.load_dataset("parquet", data_dir=str(tmp_path / "cur"))  # manifest.json is not read as data
    assert set(ds) == {"train"} and ds["train"].num_rows == 600


def test_bad_input_errors(lake, tmp_path):
    with pytest.raises(UnknownViewError) as e:
        export_view(lake, "sfft", tmp_path / "x")
    assert "sft" in e.value.available and "dpo" in e.value.available
    with pytest.raises(ExportError, match="Binder Error"):
        export_view(lake, "sft", tmp_path / "x", where="no_such_column = 1")
    assert not (tmp_path / "x").exists()
    export_view(lake, "sft", tmp_path / "x", as_of=lake.v1)
    with pytest.raises(ExportError, match="not empty"):
        export_view(lake, "sft", tmp_path / "x")
    m = export_view(lake, "sft", tmp_path / "x", overwrite=True)
    assert read_manifest(tmp_path / "x") == m
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not part of a dataset"):
        export_view(lake, "sft", tmp_path / "y", overwrite=True)
    assert (tmp_path / "y" / "notes.txt").read_text() == "mine"


# -- CLI --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_app():
    from lachesis.console import App
    from lachesis.views_cli import register

    app = App()  # as lachesis/cli.py builds `lake`: its commands' user errors end as one line and their exit code
    register(app)
    return app


def test_cli_export_and_errors(lake, cli_app, tmp_path):
    out = tmp_path / "cli"
    r = runner.invoke(cli_app, ["export", "sft", "--output", str(out), "--lake", str(lake.root), "--json",
                                "--as-of", f"trajectories={lake.v1}", "--set", "sft_test_fraction=0.2"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["lake_versions"]["trajectories"] == lake.v1 and info["variables"] == {"sft_test_fraction": 0.2}
    r = runner.invoke(cli_app, ["export", "sft", "--output", str(out), "--lake", str(lake.root)])
    assert r.exit_code == 2 and "not empty" in r.output and "--overwrite" in r.output
    r = runner.invoke(cli_app, ["export", "nope", "--output", str(tmp_path / "n"), "--lake", str(lake.root)])
    assert r.exit_code == 2 and "available views" in r.output and "sft" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(cli_app, ["export", "sft", "--output", str(tmp_path / "n"), "--lake", str(lake.root),
                                "--where", "reward >> > 1 AND"])
    assert r.exit_code == 2 and "Error" in r.output and "--where" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli_app, ["views", "--lake", str(lake.root), "--json", "--counts"])
    assert r.exit_code == 0
    listed = {v["view"]: v for v in json.loads(r.stdout)}
    assert listed["sft"]["kind"] == "dataset" and listed["sft"]["rows"] > 0
    assert listed["trajectory_chats"]["kind"] == "helper"


def test_cli_empty_export_fails_unless_allowed(lake, cli_app, tmp_path):
    """replay is empty on this lake (no steps): saying so beats exiting 0 with a dataset of nothing."""
    args = ["export", "replay", "--lake", str(lake.root)]
    r = runner.invoke(cli_app, args + ["--output", str(tmp_path / "r")])
    assert r.exit_code == 1 and "0 rows" in r.output and "--allow-empty" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "r").exists()
    r = runner.invoke(cli_app, args + ["--output", str(tmp_path / "r"), "--where", "false"])  # an empty --where too
    assert r.exit_code == 1 and "where false" in r.output
    r = runner.invoke(cli_app, ["export", "sft", "--lake", str(lake.root), "--output", str(tmp_path / "s"),
                                "--where", "reward > 2"])
    assert r.exit_code == 1 and "0 rows" in r.output
    r = runner.invoke(cli_app, args + ["--output", str(tmp_path / "r"), "--allow-empty", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["row_count"] == 0 and read_manifest(tmp_path / "r")["row_count"] == 0


def test_cli_bad_as_of_is_one_line(lake, cli_app, tmp_path):
    r = runner.invoke(cli_app, ["export", "sft", "--lake", str(lake.root), "--output", str(tmp_path / "a"),
                                "--as-of", "yesterday"])
    assert r.exit_code == 2 and "--as-of takes VERSION" in r.output and "Traceback" not in r.output


def test_atropos_trajectory_export_is_the_sft_export(lake, tmp_path, monkeypatch):
    from lachesis.views_cli import _atropos_app

    monkeypatch.setenv("LAKE_ROOT", str(lake.root))
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(_atropos_app, ["--format=parquet", "--output=trajectories/"])
    assert r.exit_code == 0, r.output
    m = read_manifest(tmp_path / "trajectories")
    assert m["view"] == "sft" and m["format"] == "parquet"
    direct = export_view(lake, "sft", tmp_path / "direct")
    assert m == direct and data_files(tmp_path / "trajectories") == data_files(tmp_path / "direct")
    r = runner.invoke(_atropos_app, ["--format=jsonl", "--output=dpo/", "--view", "dpo"])
    assert r.exit_code == 0, r.output
    assert read_manifest(tmp_path / "dpo")["view"] == "dpo"


# -- --overwrite deletes only a previous export's files; never inside the lake (issue 11.8) ---------------------
def test_overwrite_of_a_folder_no_export_wrote_deletes_nothing(lake, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "data.parquet").write_bytes(b"PAR1 not ours")
    (out / "notes.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(ExportError, match="manifest.json"):
        export_view(lake, "sft", out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["data.parquet", "notes.jsonl"]
    assert (out / "data.parquet").read_bytes() == b"PAR1 not ours"


def test_overwrite_replaces_exactly_the_files_the_previous_manifest_lists(lake, tmp_path):
    out = tmp_path / "ds"
    old = export_view(lake, "sft", out, rows_per_file=100)
    assert len(old["files"]) > 2
    new = export_view(lake, "sft", out, overwrite=True)  # fewer, larger files: the old extra parts go
    assert sorted(p.name for p in out.iterdir()) == sorted([f["path"] for f in new["files"]] + ["manifest.json"])
    (out / "extra-00000-of-00001.parquet").write_bytes(b"someone else's")
    with pytest.raises(ExportError, match="extra-00000-of-00001.parquet"):
        export_view(lake, "sft", out, overwrite=True)
    assert (out / "extra-00000-of-00001.parquet").read_bytes() == b"someone else's"
    assert read_manifest(out) == new


def test_export_into_the_lake_is_refused_and_the_lake_stays_readable(lake, tmp_path):
    before = lake.snapshot().sql("SELECT count(*) FROM trajectories").fetchall()
    partition = next((lake.root / "trajectories").glob("day=*"))
    files = sorted(partition.iterdir())
    for target in (partition, lake.root, lake.root / "new_folder", lake.root / "trajectories"):
        with pytest.raises(ExportError, match="inside the lake"):
            export_view(lake, "sft", target, overwrite=True)
    assert sorted(partition.iterdir()) == files and not (lake.root / "new_folder").exists()
    assert Lake(lake.root).snapshot().sql("SELECT count(*) FROM trajectories").fetchall() == before


def test_cli_export_into_the_lake_is_a_one_line_error(lake, cli_app):
    partition = next((lake.root / "trajectories").glob("day=*"))
    r = runner.invoke(cli_app, ["export", "sft", "--output", str(partition), "--lake", str(lake.root),
                                "--overwrite"])
    assert r.exit_code == 2 and "inside the lake" in r.output and "Traceback" not in r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) == 1
