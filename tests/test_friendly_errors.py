"""Errors and notes that say what to do (issue 27 item 7): the transfer SFT error names the missing environment's
rows and the `lake rollout` to run (not a temporary folder), `lake train watch --once` says "nothing new", a guide
command starting from the untrained tiny model says so once, and `lake --lake PATH` works before the command."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import train_helpers as th
from lachesis.cli import app
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

runner = CliRunner()


def test_transfer_sft_without_target_rows_names_them_and_the_rollout_to_run(tiny_dir, tmp_path):
    from lake import Lake
    from trainers.sft.config import SFTConfig
    from trainers.runtime.errors import TrainerInputError
    from trainers.transfer.config import TransferInitConfig, TransferTrainConfig
    from trainers.generation.rollouts import policy_rows
    from trainers.sft.sft import run_sft
    from trainers.transfer.transfer import run_train_transfer, run_transfer_init

    lake = Lake.init(tmp_path / "lake")
    lake.append("trajectories", policy_rows("bash_exec_env", "train", 4, "expert", seed=0, workers=1))
    run_sft(SFTConfig(model="tiny", data="sft", lake_root=str(lake.root), output=str(tmp_path / "bash-sft"),
                      max_steps=1, batch_size=4, progress=False, plot=False))
    run_transfer_init(TransferInitConfig(source_env="bash_exec_env", target_env="python_debug_env", freeze_layers="0",
                                         lake_root=str(lake.root), output=str(tmp_path / "spec.json")))
    with pytest.raises(TrainerInputError) as err:
        run_train_transfer(TransferTrainConfig(method="sft", max_steps=1, spec=str(tmp_path / "spec.json"),
                                               lake_root=str(lake.root), output=str(tmp_path / "t"), progress=False))
    msg = str(err.value)
    assert "no python_debug_env rows" in msg and "lake rollout --env python_debug_env" in msg, msg
    assert "lachesis-transfer-" not in msg and "/tmp" not in msg.replace(str(tmp_path), "")


def test_train_watch_once_says_nothing_new(tiny_dir, tmp_path):
    lake = tmp_path / "lake"
    assert runner.invoke(app, ["init", "--lake", str(lake)]).exit_code == 0
    res = runner.invoke(app, ["train", "watch", "--once", "--lake", str(lake), "--output", str(tmp_path / "w"),
                              "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "nothing new" in res.output and "--min-rows" in res.output
    res = runner.invoke(app, ["train", "watch", "--once", "--json", "--lake", str(lake), "--output",
                              str(tmp_path / "w"), "--threads", "1"])
    assert res.exit_code == 0 and any(json.loads(x).get("event") == "nothing_new" for x in res.stdout.splitlines()
                                      if x.startswith("{"))


def test_hermes_eval_from_the_untrained_tiny_model_says_so_once(tiny_dir):
    r = th.run_cli("hermes_eval", "--task", "shell", "--limit", "1", "--max-new-tokens", "2", "--max-turns", "1",
                   "--no-lake", env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("untrained (random weights)") == 1 and "--adapter runs/<run>" in r.stderr


def test_lake_option_before_the_command(tmp_path, monkeypatch):
    monkeypatch.delenv("LAKE_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "elsewhere"
    assert runner.invoke(app, ["--lake", str(root), "init"]).exit_code == 0
    assert (root / "trajectories").is_dir() and not (tmp_path / "data").exists()
    res = runner.invoke(app, ["--lake", str(root), "sql", "SELECT count(*) AS n FROM trajectories", "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.output) == [{"n": 0}]
