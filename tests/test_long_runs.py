"""Long runs (issue 27 item 6): progress with an ETA also when stderr is a file, a final line from a quiet
hermes_eval, loss logged at more than step 1 of a 12-step run, and Ctrl-C that checkpoints before it stops so the
printed `--resume` command continues the run."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

from rich.console import Console

import train_helpers as th
from train_helpers import REPO, tiny_dir  # noqa: F401  (session fixture)


def test_plain_progress_lines_with_eta_when_not_a_terminal():
    from trainers.runtime.progress import Progress

    out = io.StringIO()
    c = Console(file=out, force_terminal=False, width=200)
    with Progress(c, "train", 4, every=0) as p:
        for i in range(1, 5):
            time.sleep(0.01)
            p.update(i, info="loss 1.000")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("train 1/4 steps (25%)") and "ETA" in lines[0] and lines[0].endswith("loss 1.000")
    assert lines[-1].startswith("train 4/4 steps (100%)") and "ETA" not in lines[-1]
    assert len(lines) == 4  # one a step at every=0, no repeat at the end


def test_hermes_eval_with_stderr_to_a_file_prints_progress_with_eta_and_quiet_a_final_line(tiny_dir):
    args = ["--task", "shell", "--limit", "3", "--max-new-tokens", "2", "--max-turns", "1", "--no-lake"]
    r = th.run_cli("hermes_eval", *args, env={"LACHESIS_PROGRESS_EVERY": "0"})
    assert r.returncode == 0, r.stderr
    assert "eval 1/3 episodes" in r.stderr and "ETA" in r.stderr, r.stderr
    q = th.run_cli("hermes_eval", *args, "--quiet")
    assert q.returncode == 0, q.stderr
    assert "eval 1/3" not in q.stderr
    last = q.stderr.strip().splitlines()[-1]
    assert last.startswith("success rate") and "episodes 3" in last, q.stderr


def test_a_12_step_sft_run_logs_more_than_its_first_and_last_step(tiny_dir, tmp_path):
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    cfg = SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                    output=str(tmp_path / "run"), max_steps=12, batch_size=4, record_in_lake=False, progress=False,
                    plot=False)
    assert cfg.log_interval(12) == 1 and cfg.log_interval(1800) == 10 and cfg.log_interval(200) == 4
    run_sft(cfg)
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
             if "loss" in json.loads(x)]
    assert steps == list(range(1, 13))


def test_ctrl_c_checkpoints_the_step_and_the_printed_resume_command_finishes_the_run(tiny_dir, tmp_path):
    from lake import Lake

    lake = tmp_path / "lake"
    Lake.init(lake)
    project = tmp_path / "l.toml"
    keys = {"group_size": 2, "batch_size": 2, "max_turns": 1, "max_completion_length": 8, "eval_episodes": 1,
            "checkpoint_every": 1000, "learning_rate": 1e-3}
    project.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    run_dir = tmp_path / "run"
    code = "from lachesis.rl_cli import rl_train_online_main as m; m()"
    env = {**os.environ, "LACHESIS_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code, "--env", "bash_exec_env", "--steps", "4", "--eval_interval",
                             "100", "--config", str(project), "--output", str(run_dir), "--lake", str(lake), "--quiet"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = run_dir / "train_log.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and any("policy_version" in x for x in log.read_text().splitlines()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    hint = err.strip().splitlines()[-1]
    assert f"`rl_train_online --resume {run_dir}` continues" in " ".join(err.split()), err[-2000:]
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    assert ckpts, hint  # the stopped step was checkpointed although checkpoint_every is 1000
    stopped_at = int(ckpts[-1].name.split("-")[1])
    assert 1 <= stopped_at < 4 and f"step {stopped_at}" in hint
    res = subprocess.run([sys.executable, "-c", code, "--resume", str(run_dir), "--quiet"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    steps = [json.loads(x)["step"] for x in log.read_text().splitlines() if "policy_version" in json.loads(x)]
    assert steps == [1, 2, 3, 4]


def test_the_resume_hint_names_the_runs_own_command():
    from pathlib import Path

    from trainers.runtime.interrupt import resume_hint
    from trainers.rl.config import OnlineConfig
    from trainers.transfer.config import TransferOnlineConfig

    # the online trainer prints resume_hint(self.cfg.COMMAND, ...): a transfer run's config is TransferOnlineConfig
    assert (OnlineConfig.COMMAND, TransferOnlineConfig.COMMAND) == ("rl_train_online", "rl_train_transfer")
    hint = resume_hint(TransferOnlineConfig.COMMAND, Path("runs/t"), 7, 5)
    assert hint == "interrupted after step 7; checkpoint at step 5 in runs/t: `rl_train_transfer --resume runs/t` " \
                   "continues from it"
    assert "without --resume" in resume_hint("rl_train_online", Path("runs/o"), None, None)


def test_a_transfer_run_resumes_only_under_its_own_command(tmp_path):
    """Online RL reads a stopped run's config without knowing transfer (trainers/transfer sits above it): resumed by
    rl_train_online, a transfer run would lose its frozen layers, so that is a one-line error naming the command to
    use; rl_train_transfer resumes it whole, and an actor process reads its online fields."""
    import json
    from dataclasses import asdict

    import pytest

    from trainers.rl.config import OnlineConfig
    from trainers.rl.online import read_run_config
    from trainers.runtime.errors import TrainerInputError
    from trainers.transfer.config import TransferOnlineConfig

    spec = {"freeze_layers": [0, 1], "source_env": "bash_exec_env", "target_env": "git_repo_env"}
    cfg = TransferOnlineConfig(env="git_repo_env", steps=4, transfer=spec)
    (tmp_path / "config.json").write_text(json.dumps({**asdict(cfg), "command": cfg.COMMAND, "method": "online"}))
    with pytest.raises(TrainerInputError, match=r"started by rl_train_transfer; resume it with `rl_train_transfer "
                                                r"--resume"):
        read_run_config(tmp_path, OnlineConfig)
    whole = read_run_config(tmp_path, TransferOnlineConfig)
    assert isinstance(whole, TransferOnlineConfig) and whole.transfer == spec and whole.resume == str(tmp_path)
    online = read_run_config(tmp_path)  # an actor: the online fields
    assert type(online) is OnlineConfig and online.env == "git_repo_env" and online.steps == 4
