"""atropos_trajectory_export warns when it exported fewer complete interactions than the guide's minimum for
strategy 1 (50), in one stderr line, and says how many there are per task (a table, or --json's field); the
counts are read back from the written files in every format."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.views_helpers import new_lake, trajectory

runner = CliRunner()


def app():
    from lachesis.views_cli import _atropos_app

    return _atropos_app


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """12 good trajectories over 3 tasks (6, 4, 2), 5 failures that the sft view leaves out."""
    lk = new_lake(tmp_path_factory.mktemp("few") / "lake")
    recs = [trajectory(i, f"task-{'abc'[0 if i < 6 else 1 if i < 10 else 2]}", 1.0, True) for i in range(12)]
    recs += [trajectory(100 + i, "task-d", 0.0, False) for i in range(5)]
    lk.append("trajectories", recs)
    return lk


def _invoke(lake, tmp_path, *args):
    return runner.invoke(app(), ["--lake", str(lake.root), "--output", str(tmp_path / "out"), *args])


def test_few_interactions_warn_with_counts_per_task(lake, tmp_path):
    r = _invoke(lake, tmp_path, "--format=parquet")
    assert r.exit_code == 0, r.output
    warning = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(warning) == 1 and warning[0].startswith("warning: only 12 complete interactions exported over 3 tasks")
    assert "at least 50" in warning[0] and "strategy 1" in warning[0]
    table = r.stdout[r.stdout.index("task_id"):]
    rows = [line.split("│")[1:3] for line in table.splitlines() if line.count("│") == 3]
    assert [(t.strip(), int(n)) for t, n in rows] == [("task-a", 6), ("task-b", 4), ("task-c", 2)]


@pytest.mark.parametrize("fmt", ["jsonl", "hf"])
def test_json_field_in_every_format(lake, tmp_path, fmt):
    r = _invoke(lake, tmp_path, f"--format={fmt}", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)["interactions"]
    assert info == {"total": 12, "minimum": 50, "enough": False,
                    "per_task": {"task-a": 6, "task-b": 4, "task-c": 2}, "warning": info["warning"]}
    assert info["warning"].startswith("only 12 complete interactions") and "warning:" in r.stderr


def test_enough_interactions_and_threshold(lake, tmp_path):
    r = _invoke(lake, tmp_path, "--min-interactions", "12", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)["interactions"]
    assert info["enough"] is True and info["warning"] is None and r.stderr.strip() == ""
    r = runner.invoke(app(), ["--lake", str(lake.root), "--output", str(tmp_path / "o2"), "--min-interactions", "13"])
    assert r.exit_code == 0 and "only 12 complete interactions" in r.stderr


def test_view_without_task_column_counts_rows(lake, tmp_path):
    r = _invoke(lake, tmp_path, "--view", "skill_effect", "--allow-empty", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)["interactions"]
    assert (info["total"], info["per_task"]) == (0, {}) and "over" not in info["warning"]
