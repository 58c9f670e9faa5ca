"""rl_list_environments: table, --tag filter, --json, unknown tag exit 2."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from lachesis.envs_cli import app

runner = CliRunner()


def test_lists_every_environment_with_counts():
    res = runner.invoke(app, [])
    assert res.exit_code == 0
    for name in ("python_debug_env", "bash_exec_env", "git_repo_env"):
        assert name in res.output
    assert "3000" in res.output and "100" in res.output


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
