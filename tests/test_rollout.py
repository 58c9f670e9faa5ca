"""Rollout runner: native trajectory records (pure), determinism, lake append, `lake rollout`."""
from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

import envs

from ingest.rollout import RolloutSpec, append_rollouts, run_rollouts, summarize
from lachesis.console import App
from lachesis.rollout_cli import register

VOLATILE = ("trajectory_id", "group_id")


def test_expert_records_follow_the_lake_contract():
    records = run_rollouts(RolloutSpec(env="bash_exec_env", policy="expert", episodes=3, split="test"))
    assert summarize(records) == {"episodes": 3, "mean_reward": 1.0, "success_rate": 1.0}
    rec = records[0]
    assert rec["task_id"] == "bash_exec_env:test:00000" and rec["env"] == "bash_exec_env"
    assert rec["env_tags"] == ["shell", "bash"] and rec["split"] == "test"
    assert rec["model"] == "policy:expert" and rec["policy_version"] == "expert"
    roles = [m["role"] for m in rec["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    user, run, tool, submit = rec["messages"][1:]
    task = envs.find_task("bash_exec_env", rec["task_id"])
    assert user["content"] == task.instruction and rec["messages"][0]["content"].startswith("You are a shell agent")
    # the tool call is structure, not text: the raw action is the step's
    assert run["content"] == "" and run["tool_calls"][0] == {"id": "call_0_0", "name": "run",
                                                               "arguments": task.solution[0]["arguments"]}
    assert rec["steps"][0]["action"] == envs.format_tool_call("run", task.solution[0]["arguments"])
    assert tool["tool_call_id"] == run["tool_calls"][0]["id"] and tool["name"] == "run"
    assert submit["tool_calls"][0]["name"] == "submit"
    assert [s["done"] for s in rec["steps"]] == [False, True]
    assert rec["steps"][0]["observation"] == user["content"] and rec["steps"][0]["result"] == tool["content"]
    assert rec["steps"][-1]["reward"] == 1.0 and rec["reward"] == 1.0 and rec["success"] is True
    assert [t["function"]["name"] for t in rec["metadata"]["tools"]] == ["run", "submit"]
    assert len({r["task_id"] for r in records}) == 3


def test_rollouts_are_deterministic_for_a_seed():
    spec = RolloutSpec(env="git_repo_env", policy="noisy", episodes=3, seed=5)
    a, b = run_rollouts(spec), run_rollouts(spec)
    strip = lambda rs: [{k: v for k, v in r.items() if k not in VOLATILE} for r in rs]  # noqa: E731
    assert strip(a) == strip(b)
    assert a[0]["task_id"] == "git_repo_env:train:00005"


def test_unparseable_actions_get_a_tool_turn_with_the_error():
    records = run_rollouts(RolloutSpec(env="bash_exec_env", policy="random", episodes=6, seed=1))
    errors = [m for r in records for m in r["messages"] if m["role"] == "tool" and m["content"].startswith("error:")]
    assert errors and all(r["reward"] == 0.0 for r in records)


def test_append_to_lake_and_read_back(tmp_path):
    from lake import Lake

    records = run_rollouts(RolloutSpec(env="python_debug_env", policy="expert", episodes=2, split="test"))
    result = append_rollouts(records, tmp_path / "lake")
    assert result.rows == 2
    snap = Lake(tmp_path / "lake").snapshot()
    rows = snap.sql("SELECT task_id, reward, success, model, env_tags, split FROM trajectories ORDER BY task_id"
                    ).fetchall()
    assert rows == [(r["task_id"], 1.0, True, "policy:expert", ["python", "debug", "code"], "test") for r in records]


def _app() -> typer.Typer:
    app = App()  # as lachesis/cli.py builds `lake`: its commands' user errors end as one line and exit 2
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps `rollout` a named subcommand
        pass

    return app


def test_lake_rollout_takes_the_aliases_hermes_eval_takes(tmp_path):
    """`hermes_eval --task debug-python` worked while `lake rollout --env debug-python` was refused."""
    res = CliRunner().invoke(_app(), ["rollout", "--env", "debug-python", "--episodes", "1", "--split", "test",
                                      "--lake", str(tmp_path / "lake"), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["env"] == "python_debug_env" and summary["rows"] == 1 and summary["mean_reward"] == 1.0


def test_lake_rollout_command(tmp_path):
    runner = CliRunner()
    lake = str(tmp_path / "lake")
    res = runner.invoke(_app(), ["rollout", "--env", "bash_exec_env", "--policy", "expert", "--episodes", "2",
                                 "--split", "test", "--lake", lake, "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["episodes"] == 2 and summary["mean_reward"] == 1.0 and summary["rows"] == 2
    res = runner.invoke(_app(), ["rollout", "--env", "git_repo_env", "--templates", "bisect", "--episodes", "1",
                                 "--lake", lake, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout[res.stdout.index("{"):])["version"] == 2
    res = runner.invoke(_app(), ["rollout", "--env", "git_repo_env", "--templates", "nope", "--lake", lake])
    assert res.exit_code == 2 and "templates: commit" in res.output
    res = runner.invoke(_app(), ["rollout", "--env", "nope", "--lake", lake])
    assert res.exit_code == 2 and "bash_exec_env" in res.output and "debug-python" in res.output
    res = runner.invoke(_app(), ["rollout", "--env", "bash_exec_env", "--policy", "clever", "--lake", lake])
    assert res.exit_code == 2 and "policies: expert, noisy, recover, random" in res.output
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"task_id": "a", "instruction": "x", "checks": [{"type": "file", "path": "f"}]}\n')
    res = runner.invoke(_app(), ["rollout", "--env", "bash_exec_env", "--tasks", str(bad), "--lake", lake])
    assert res.exit_code == 2 and "tasks.jsonl:1: field 'checks'" in res.output
