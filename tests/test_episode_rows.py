"""One episode, three writers, identical rows: `lake rollout`, hermes_eval and the trainers' rollouts all
record through transcript/recorder.py, so the same scripted episode lands in the lake as the same row."""
from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

import envs
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

ENV, TASK_INDEX = "bash_exec_env", 3
TASK_ID = f"{ENV}:test:{TASK_INDEX:05d}"
# What a writer says about itself; everything else of a row is the episode's.
WRITER_COLUMNS = ("trajectory_id", "group_id", "model", "policy_version")
WRITER_METADATA = ("source", "policy", "eval_run_id", "adapter")
COLUMNS = "task_id, env, env_tags, split, messages, steps, reward, success, metadata"


def _lake_rollout(lake) -> None:
    from lachesis.rollout_cli import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `rollout` a named subcommand
    # seed 3: task index 3, played with seed 3
    res = CliRunner().invoke(app, ["rollout", "--env", "shell", "--episodes", "1", "--split", "test", "--seed",
                                   str(TASK_INDEX), "--lake", str(lake)])
    assert res.exit_code == 0, res.output


def _trainer_rollout() -> dict:
    from trainers.generation.rollouts import policy_rows

    (row,) = policy_rows(ENV, "test", 1, "expert", seed=0, offset=TASK_INDEX)  # seed = 0 + offset
    return row


def _hermes_eval(tok) -> dict:
    """hermes_eval's loop with the expert's replies as the "generated" tokens."""
    from trainers.generation.generate import END_OF_TURN
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import episode_record
    from trainers.generation.episodes import Episode, play
    from trainers.generation.generate import Generation

    task = envs.find_task(ENV, TASK_ID)
    plan = [envs.format_tool_call(c["name"], c["arguments"]) for c in task.solution]
    plan.append(envs.format_tool_call("submit", {}))
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    episode = Episode(envs.make(ENV, split="test"), TASK_ID, TASK_INDEX, tok)
    try:
        play([episode], lambda prompts, eps: [Generation.scripted(tok.encode(plan[e.turns], add_special_tokens=False) + [eos])
                                              for e in eps], tok, EvalSettings().batch_size, EvalSettings().max_context)
    finally:
        episode.env.close()
    return episode_record(episode, run_id="eval-test", model="tiny", adapter=None)


def _episode_part(row: dict) -> dict:
    meta = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else dict(row["metadata"])
    return {**{k: v for k, v in row.items() if k not in WRITER_COLUMNS},
            "metadata": {k: v for k, v in meta.items() if k not in WRITER_METADATA}}


def test_one_scripted_episode_gives_identical_rows_through_every_writer(tiny_dir, tmp_path):
    from lake import Lake

    from trainers.modeling.models import load_tokenizer

    lake_root = tmp_path / "lake"
    _lake_rollout(lake_root)
    lake = Lake.open(lake_root)
    trainer, evaluated = _trainer_rollout(), _hermes_eval(load_tokenizer(str(tiny_dir)))
    # in memory, before the lake: the same record but for who wrote it
    assert _episode_part(trainer) == _episode_part(evaluated)
    assert evaluated["reward"] == 1.0 and evaluated["success"] is True and len(evaluated["steps"]) == 2
    lake.append("trajectories", [trainer, evaluated])
    rows = lake.snapshot().arrow(f"SELECT source, {COLUMNS} FROM trajectories ORDER BY source").to_pylist()
    assert [r["task_id"] for r in rows] == [TASK_ID] * 3
    parts = [_episode_part({k: v for k, v in r.items() if k != "source"}) for r in rows]
    assert parts[0] == parts[1] == parts[2]
    assert [m["role"] for m in parts[0]["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
