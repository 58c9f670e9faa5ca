"""Checkpoints that cannot run code and that a broken file cannot wedge (issue 26 items 7 and 8).

A planted pickle in state.pt (one that would create a marker file through os.system when unpickled) is refused by
the weights-only load, never run; a truncated state.pt / state.json / weights file, or garbage in heartbeat.json or
watch.json, gives one line and a fall back to the last complete checkpoint, never a traceback; `lake train status`
keeps answering; a rewind of offsets behind those registered in the lake is said in one line and in the next runs
event. The unit tests use a small torch module (fast); the watcher tests the session's tiny model.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)
from views_helpers import seeded_trajectories

from lake import Lake
from trainers.runtime import checkpoint
from trainers.runtime.errors import TrainerInputError
from trainers.watch.loop import StreamTrainer
from trainers.watch.config import WatchConfig
from trainers.watch.status import watcher_status

FAST = dict(split="all", batch_size=8, max_steps=1, progress=False, threads=1)


class _Planted:
    """What an attacker plants: unpickling it runs a shell command that creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _tiny_state(run_dir: Path, steps: int, keep: int = 10) -> list[Path]:
    """`steps` checkpoints of a Linear layer with AdamW + LambdaLR, weights as safetensors (as save_pretrained)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    out = []
    for step in range(1, steps + 1):
        lin(torch.randn(3, 4)).sum().backward()
        opt.step()
        sched.step()

        def save_weights(folder: str) -> None:
            os.makedirs(folder)
            save_file({k: v.contiguous() for k, v in lin.state_dict().items()}, f"{folder}/model.safetensors")

        out.append(checkpoint.save(run_dir, step, save_weights, opt, sched, {"position": step}, keep=keep))
    return out


def _plant(path: Path, marker: Path, zipped: bool) -> None:
    """A state.pt that runs `touch marker` when unpickled: a bare pickle, or inside torch.save's zip archive."""
    if zipped:
        buf = io.BytesIO()
        torch.save({"optimizer": _Planted(marker), "scheduler": {}, "rng": {}}, buf)
        path.write_bytes(buf.getvalue())
    else:
        path.write_bytes(pickle.dumps({"optimizer": _Planted(marker), "scheduler": {}, "rng": {}}))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# ----------------------------------------------------------------------------------------------- the checkpoint module
def test_state_pt_loads_weights_only_and_restores_every_rng(tmp_path):
    [ckpt] = _tiny_state(tmp_path, 1)
    blob = torch.load(ckpt / "state.pt", weights_only=True)  # what the numpy ndarray of the RNG state failed
    assert set(blob) == {"optimizer", "scheduler", "rng"}
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    want = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = checkpoint.rng_state()
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    checkpoint.set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == want


@pytest.mark.attack
@pytest.mark.parametrize("zipped", [False, True], ids=["bare-pickle", "torch-zip"])
def test_a_planted_pickle_state_pt_is_refused_and_never_runs(tmp_path, zipped):
    [ckpt] = _tiny_state(tmp_path / "run", 1)
    marker = tmp_path / "pwned"
    _plant(ckpt / "state.pt", marker, zipped)
    lin = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(lin.parameters())
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load_into(ckpt, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
    assert "refused" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(checkpoint.CheckpointError, match="no usable checkpoint"):
        checkpoint.usable(tmp_path / "run")  # the only checkpoint: refused, not a silent start from nothing
    assert not marker.exists()


@pytest.mark.attack
def test_pickled_weights_in_place_of_safetensors_are_refused(tmp_path):
    """Weights are safetensors (save_pretrained's default): a checkpoint whose weights are a pickle is broken."""
    first, second = _tiny_state(tmp_path / "run", 2)
    marker = tmp_path / "pwned"
    (checkpoint.weights(second) / "model.safetensors").unlink()
    (checkpoint.weights(second) / "pytorch_model.bin").write_bytes(pickle.dumps(_Planted(marker)))
    said: list[str] = []
    assert checkpoint.usable(tmp_path / "run", report=said.append) == first
    assert "no safetensors weights" in said[0] and not marker.exists()


@pytest.mark.attack
@pytest.mark.parametrize("broken", ["state.pt", "state.json", "weights"])
def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, broken):
    first, second = _tiny_state(tmp_path, 2)
    target = {"state.pt": second / "state.pt", "state.json": second / "state.json",
              "weights": checkpoint.weights(second) / "model.safetensors"}[broken]
    _truncate(target)
    said: list[str] = []
    assert checkpoint.usable(tmp_path, ("position",), report=said.append, set_aside=True) == first
    assert len(said) == 1 and second.name in said[0] and broken.split(".")[0] in said[0] and "\n" not in said[0]
    assert checkpoint.complete(tmp_path) == [first]  # set aside: no actor or resume picks it up
    assert checkpoint.set_aside_found(tmp_path) == [f"broken-{second.name}"]


# ----------------------------------------------------------------------------------------------- the streaming trainer
def _good(n: int, start: int) -> list[dict]:
    rows = seeded_trajectories(n, seed=start, start=start)
    for r in rows:
        r["success"], r["reward"] = True, 1.0
    return rows


def _watcher(lake: Lake, folder: Path, events: list | None = None) -> StreamTrainer:
    cfg = WatchConfig(lake_root=str(lake.root), output=str(folder), **FAST)
    return StreamTrainer(cfg, emit=(events.append if events is not None else None))


def _two_increments(tmp_path: Path) -> tuple[Lake, Path, list[dict]]:
    lake = Lake.init(tmp_path / "lake")
    folder = tmp_path / "watch"
    st = _watcher(lake, folder)
    done = []
    try:
        for i in range(2):
            lake.append("trajectories", _good(3, 10 * i))
            done.append(st.step())
    finally:
        st.close()
    return lake, folder, done


@pytest.mark.attack
def test_lake_train_watch_refuses_a_planted_state_pt_in_one_line(tmp_path, tiny_dir, capsys):
    from lachesis.cli import app
    from lachesis.console import run

    lake = Lake.init(tmp_path / "lake")
    lake.append("trajectories", _good(3, 0))
    st = _watcher(lake, tmp_path / "watch")
    try:
        st.step()
    finally:
        st.close()
    marker = tmp_path / "pwned"
    _plant(checkpoint.latest(tmp_path / "watch") / "state.pt", marker, zipped=True)
    with pytest.raises(SystemExit) as exit_:
        run(app, ["train", "watch", "--lake", str(lake.root), "--output", str(tmp_path / "watch"), "--once",
                  "--split", "all", "--threads", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "refused" in err and "posix.system" in err and "Traceback" not in err
    assert not marker.exists()


@pytest.mark.attack
def test_a_truncated_increment_falls_back_says_the_rewind_and_records_it(tmp_path, tiny_dir):
    lake, folder, done = _two_increments(tmp_path)
    first, second = checkpoint.complete(folder)
    _truncate(second / "state.pt")
    status = watcher_status(folder)  # lake train status while it is broken: answers, names the broken one
    assert status["increments"] == 1 and status["offsets"] == done[0]["manifest"]["upto"]
    assert any(second.name in line for line in status["broken"])
    events: list[dict] = []
    st = _watcher(lake, folder, events)
    try:
        warnings = [e["message"] for e in events if e["event"] == "warning"]
        assert any(second.name in w and "state.pt" in w for w in warnings)
        assert any(w.startswith("rewinding") and "trajectories from version 2" in w for w in warnings)
        assert st.counter.n == 1 and st.offsets == done[0]["manifest"]["upto"]
        redo = st.step()  # increment 1's successor again, on the rows of the broken one
    finally:
        st.close()
    assert redo["metrics"]["increment"] == 2 and redo["manifest"]["upto"] == done[1]["manifest"]["upto"]
    assert redo["metrics"]["rewound"] == {"trajectories": {"registered": 2, "to": 1}}
    assert any("rewinding" in w for w in redo["metrics"]["warnings"])
    assert watcher_status(folder)["broken"] == [f"broken-{second.name} (set aside)"]


@pytest.mark.attack
def test_garbage_heartbeat_and_watch_json_give_one_line_and_the_watcher_restarts(tmp_path, tiny_dir, capsys):
    from lachesis.cli import app
    from lachesis.console import run

    lake, folder, done = _two_increments(tmp_path)
    serial = json.loads((folder / "watch.json").read_text())["serial"]
    (folder / "heartbeat.json").write_bytes(b"\x00{garbage")
    (folder / "watch.json").write_text('{"name": 7')
    with pytest.raises(SystemExit) as exit_:
        run(app, ["train", "status", "--runs", str(tmp_path), "--json"])
    assert exit_.value.code == 0
    [status] = json.loads(capsys.readouterr().out)
    assert "watch.json is unreadable" in status["error"] and status["alive"] is False
    (folder / "watch.json").write_text('["not", "an", "object"]')
    events: list[dict] = []
    st = _watcher(lake, folder, events)  # rewrites watch.json, keeping the serial of its increments
    try:
        assert any("watch.json is unreadable" in e["message"] for e in events if e["event"] == "warning")
        assert st.counter.n == 2 and st.meta["serial"] == serial
        assert watcher_status(folder)["alive"]
        (folder / "heartbeat.json").write_text("{")  # a second watcher reads it to name the running one
        with pytest.raises(TrainerInputError, match="a watcher already runs"):
            _watcher(lake, folder)
    finally:
        st.close()
    status = watcher_status(folder)
    assert status["increments"] == 2 and status["last_increment"]["run_id"] == done[1]["run_id"]


@pytest.mark.slow  # a 4-step online run and its resume: about a minute on 2 busy cores
@pytest.mark.attack
def test_rl_train_online_resume_falls_back_past_a_truncated_checkpoint_and_says_so(tiny_dir, tmp_path, capsys):
    from test_train_online import write_project, write_tasks
    from trainers.rl.online import run_online
    from trainers.rl.config import OnlineConfig

    lake = Lake.init(tmp_path / "lake")
    run_dir = tmp_path / "run"
    cfg = dict(env="bash_exec_env", steps=4, eval_interval=100, config=str(write_project(tmp_path / "l.toml",
               max_turns=1, eval_episodes=1)), tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")),
               output=str(run_dir), lake_root=str(lake.root), progress=False, threads=1)
    run_online(OnlineConfig(**cfg))
    (run_dir / "summary.json").unlink()  # as if stopped after its last checkpoint
    first, last = checkpoint.complete(run_dir)
    _truncate(last / "state.pt")
    summary = run_online(OnlineConfig(resume=str(run_dir), progress=False, threads=1))
    err = capsys.readouterr().err
    assert f"checkpoint {last.name} is broken" in err and f"resuming from {first.name}" in err
    assert any(last.name in w for w in summary["warnings"]) and summary["steps"] == 4
    assert checkpoint.set_aside_found(run_dir) == [f"broken-{last.name}"]
    steps = [json.loads(x)["step"] for x in (run_dir / "train_log.jsonl").read_text().splitlines()
             if "step" in json.loads(x) and not json.loads(x).get("eval") and not json.loads(x).get("summary")]
    assert steps == [1, 2, 3, 4]  # steps 3 and 4 trained again, once each in the kept log
