"""rl_list_environments: table, --tag filter, --json, unknown tag exit 2."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from lachesis.envs_cli import app

runner = CliRunner()


def _first_lines_of_rows(output: str) -> dict[str, list[str]]:
    """The table's cells by environment name (the first line of each row: long descriptions fold)."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0].endswith("_env"):
            rows[cells[0]] = cells
    return rows


def test_lists_every_environment_with_counts():
    res = runner.invoke(app, [], env={"COLUMNS": "160"})
    assert res.exit_code == 0
    rows = _first_lines_of_rows(res.output)
    assert sorted(rows) == ["bash_exec_env", "git_repo_env", "python_debug_env", "web_click_env", "web_fill_env",
                            "web_form_env", "web_gen_env", "web_mix_env"]
    assert rows["bash_exec_env"][1:5] == ["shell, bash", "shell, bash", "3000", "100"]
    assert rows["python_debug_env"][1:5] == ["python, debug, code", "debug-python, python-debug, python", "3000", "100"]
    assert rows["web_form_env"][1:5] == ["web", "web-form, web", "3000", "250"]  # 10 test seeds per web task
    assert rows["web_fill_env"][1:5] == ["web", "web-fill", "3000", "110"]  # and per task of a web task group
    assert rows["web_mix_env"][1:5] == ["web", "web-mix", "3480", "250"]  # 4 generated layouts in train only
    assert [rows[n][3:5] for n in ("bash_exec_env", "git_repo_env", "python_debug_env")] == [["3000", "100"]] * 3


def test_json_has_the_counts_and_aliases():
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, ["--json"]).output)}
    assert rows["git_repo_env"]["tasks"] == {"train": 3000, "test": 100, "test_families": 100}
    assert rows["git_repo_env"]["aliases"] == ["git"]


def test_tag_filter_and_json():
    res = runner.invoke(app, ["--tag", "shell", "--json"])
    assert res.exit_code == 0
    rows = json.loads(res.output)
    assert [r["name"] for r in rows] == ["bash_exec_env", "git_repo_env"]
    assert rows[1]["tags"] == ["shell", "git"] and rows[1]["tasks"]["test"] >= 100


def test_unknown_tag_lists_the_tags_and_exits_2():
    res = runner.invoke(app, ["--tag", "nope"])
    assert res.exit_code == 2
    assert "unknown tag 'nope'" in res.output and "shell" in res.output and "python" in res.output


def test_envs_imports_nothing_of_ours_and_no_torch():
    import subprocess
    import sys

    code = ("import sys, envs; envs.make('bash_exec_env').reset(seed=0); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'lake', 'views', 'ingest', 'trainers', "
            "'lachesis', 'transformers', 'duckdb', 'pyarrow')]; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
