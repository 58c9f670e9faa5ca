"""`lake train watch --recipe online`: the online recipe is rl_train_online --actors N's one loop (trainers/rl/learner.py):
actor processes append rollouts to the lake and the learner trains on them from its change feed, the lake being the
only channel. The watch options that apply map onto OnlineConfig; any other is a one-line error."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from test_train_online import lake_root, sql, write_project  # noqa: F401  (fixture)
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from lachesis.cli import app
from lachesis.console import run
from trainers.runtime.errors import TrainerInputError
from trainers.rl.config import OnlineConfig
from trainers.watch.config import WatchConfig


def lake_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`lake ARGV` in this process, as the console script parses it: (exit code, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        run(app, argv, prog_name="lake")
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_the_watch_options_that_apply_map_onto_the_online_config():
    cfg = WatchConfig(recipe="online", model="tiny", lake_root="L", output="out", seed=7, threads=1, device="cpu",
                      eval_task="shell", eval_every=2, max_increments=4, actors=3)
    assert cfg.online_config() == OnlineConfig(model="tiny", lake_root="L", output="out", seed=7, threads=1,
                                               device="cpu", env="shell", eval_interval=2, steps=4, actors=3,
                                               plot=False)
    default = WatchConfig(recipe="online").online_config()
    assert default.seed is None  # not given: the project config's, as rl_train_online
    assert default.steps == OnlineConfig().steps and default.eval_interval == default.steps  # --eval-every 0
    assert default.actors == 2


@pytest.mark.parametrize("argv, message", [
    (["--lr", "1e-3"], "--lr does not apply to --recipe online"),
    (["--once"], "--once does not apply to --recipe online"),
    (["--view", "sft"], "--view does not apply to --recipe online"),
    (["--lora"], "--full/--lora does not apply to --recipe online"),
    (["--actors", "1"], "--actors must be at least 2 for --recipe online"),
])
def test_an_option_the_online_recipe_does_not_take_is_one_line(argv, message, capsys):
    code, _, err = lake_cli(["train", "watch", "--recipe", "online", *argv], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_actors_do_not_apply_to_a_view_recipe():
    with pytest.raises(TrainerInputError, match="--actors does not apply to --recipe sft"):
        WatchConfig(actors=3)


def test_watch_recipe_online_alternates_rollouts_into_the_lake_and_training(tiny_dir, tmp_path, lake_root, capsys,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)  # its lachesis.toml: small batches, one turn, one evaluation episode
    write_project(tmp_path / "lachesis.toml", max_turns=1, eval_episodes=1)
    code, out, err = lake_cli(["train", "watch", "--recipe", "online", "--lake", str(lake_root), "--output",
                               str(tmp_path / "run"), "--max-increments", "2", "--eval-task", "shell", "--threads",
                               "1", "--device", "cpu", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["event"] == "online" and summary["steps"] == 2 and summary["env"] == "bash_exec_env"

    run_id = summary["run_id"]
    steps = [json.loads(x) for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    consumed = Counter(i for r in steps if "consumed_ids" in r for i in r["consumed_ids"])
    rows = sql(lake_root, f"""SELECT trajectory_id, json_extract(metadata, '$.actor')::INT AS actor FROM trajectories
                              WHERE json_extract_string(metadata, '$.train_run_id') = '{run_id}'
                                AND split = 'train'""")
    assert {r["actor"] for r in rows} == {0, 1}  # two actor processes wrote rollouts into the lake
    assert Counter(r["trajectory_id"] for r in rows) == consumed  # and the learner trained each from there, once
    assert summary["rollouts"] == len(rows)
