"""Issue 37, items 2, 4 and 7: the streaming trainer continues a trained run (`lake train watch --from`), the model
server serves that run and then the trainer's increments under one served name (`--adapter` with `--follow`),
each version named by its run id (`tiny@<run_id>`, `tiny@<serial>:<N>`), and an adapter trained on another base
is refused in one line while the last good version keeps serving."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from serve_model_helpers import client, running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)
from views_helpers import seeded_trajectories

from lake import Lake
from serving.config import ServeModelConfig
from serving.errors import ServingError
from trainers.runtime import checkpoint
from trainers.runtime.errors import TrainerInputError
from trainers.watch.config import WatchConfig
from trainers.watch.loop import StreamTrainer

FAST = dict(split="all", batch_size=8, max_steps=2, progress=False, threads=1)


def _sft_run(tiny_dir: Path, tmp_path: Path) -> Path:
    """A finished LoRA SFT run of the tiny model (runs/<run>: config.json, adapter/, summary.json)."""
    import train_helpers as th
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    run = tmp_path / "run"
    run_sft(SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                      output=str(run), full=False, max_steps=2, batch_size=4, record_in_lake=False,
                      progress=False, plot=False))
    return run


def _good(n: int, start: int) -> list[dict]:
    rows = seeded_trajectories(n, seed=start, start=start)
    for r in rows:
        r["success"], r["reward"] = True, 1.0
    return rows


def _adapter_state(model) -> dict:
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


@pytest.fixture(scope="module")
def run(tiny_dir, tmp_path_factory) -> Path:
    return _sft_run(tiny_dir, tmp_path_factory.mktemp("sft"))


def _other_base(tiny_dir: Path, at: Path) -> Path:
    """A copy of the tiny model with other weights: another base with the same shapes."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_dir, at)
    tensors = load_file(at / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, at / "model.safetensors", metadata={"format": "pt"})
    return at


def test_a_watcher_continues_a_trained_run_and_the_server_serves_it_then_its_increments(tiny_dir, run, tmp_path):
    import torch
    from safetensors.torch import load_file

    lake = Lake.init(tmp_path / "lake")
    watch = tmp_path / "watch"
    st = StreamTrainer(WatchConfig(model=str(tiny_dir), from_run=str(run), full=False, lake_root=str(lake.root),
                                   output=str(watch), **FAST))
    try:
        saved = load_file(run / "adapter" / "adapter_model.safetensors")
        start = _adapter_state(st.model)
        assert set(start) == set(saved) and all(torch.equal(start[k], saved[k]) for k in saved)
        assert st.trainable > 0 and st.started_from == str(run / "adapter")
        lake.append("trajectories", _good(4, 3))
        ev = st.step()
        assert ev["metrics"]["steps"] == 2
        after = _adapter_state(st.model)
        assert any(not torch.equal(after[k], saved[k]) for k in saved)  # it trained the run's adapter on
    finally:
        st.close()
    serial = ev["metadata"]["serial"]
    run_id = json.loads((run / "summary.json").read_text())["run_id"]

    # the server: the run first (no increment yet in an empty folder), then the trainer's increments
    empty = tmp_path / "watch-new"
    cfg = ServeModelConfig(model="tiny", adapter=str(run), follow=str(empty), lake_root=str(tmp_path / "served"),
                           poll_interval=0.05, threads=1)
    with running(cfg) as (url, app):
        engine = app.state.serving.engine
        assert [v.name for v in engine.versions()] == [f"tiny@{run_id}"]
        r = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, temperature=0)
        assert r.model == f"tiny@{run_id}"
        shutil.copytree(watch, empty, dirs_exist_ok=True)  # the trainer's first increment lands
        deadline = time.monotonic() + 60
        while engine.versions()[-1].name != f"tiny@{serial}:1":
            assert time.monotonic() < deadline, app.state.serving.follower.events
            time.sleep(0.05)
        r = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, temperature=0)
        assert r.model == f"tiny@{serial}:1"
    with Lake.open(tmp_path / "served").snapshot() as snap:
        versions = [x["policy_version"] for x in snap.arrow(
            "SELECT policy_version FROM trajectories ORDER BY occurred_at").to_pylist()]
    assert versions == [f"tiny@{run_id}", f"tiny@{serial}:1"]

    # a watcher restarted on its folder continues its own increment, not the run
    again = StreamTrainer(WatchConfig(model=str(tiny_dir), from_run=str(run), full=False, lake_root=str(lake.root),
                                      output=str(watch), **FAST))
    try:
        assert again.counter.n == 1 and again.started_from is None
        assert all(torch.equal(_adapter_state(again.model)[k], after[k]) for k in after)
    finally:
        again.close()


def test_from_a_run_that_does_not_fit_is_one_line(tiny_dir, run, tmp_path):
    lake = Lake.init(tmp_path / "lake")
    with pytest.raises(TrainerInputError, match="holds a LoRA adapter .*train it with --lora"):
        StreamTrainer(WatchConfig(model=str(tiny_dir), from_run=str(run), full=True, lake_root=str(lake.root),
                                  output=str(tmp_path / "w1"), **FAST))
    other = _other_base(tiny_dir, tmp_path / "other-base")
    with pytest.raises(TrainerInputError, match=f"was trained on {tiny_dir}, not on --model"):
        StreamTrainer(WatchConfig(model=str(other), from_run=str(run), full=False, lake_root=str(lake.root),
                                  output=str(tmp_path / "w2"), **FAST))
    with pytest.raises(TrainerInputError, match="--from .*no-such-run"):
        WatchConfig(model=str(tiny_dir), from_run=str(tmp_path / "no-such-run"))


def test_an_adapter_of_another_base_is_refused_and_the_last_good_version_serves(tiny_dir, run, tmp_path, capsys):
    other = _other_base(tiny_dir, tmp_path / "other-base")
    foreign = tmp_path / "foreign"
    shutil.copytree(run / "adapter", foreign)
    cfg_path = foreign / "adapter_config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "base_model_name_or_path": str(other)}))

    with pytest.raises(ServingError, match=f"was trained on {other}, not on the served base"):
        with running(ServeModelConfig(model="tiny", adapter=str(foreign), record="off", threads=1)):
            pass

    # a trainer folder whose second increment is an adapter of the other base
    watch = tmp_path / "watch"
    first = watch / checkpoint.DIR / f"{checkpoint.PREFIX}{1:08d}"
    shutil.copytree(run / "adapter", checkpoint.weights(first))
    (first / "state.json").write_text(json.dumps({"step": 1}))
    (watch / "watch.json").write_text(json.dumps({"config": {"eval_every": 0}}))
    cfg = ServeModelConfig(model="tiny", follow=str(watch), record="off", poll_interval=0.05, threads=1)
    with running(cfg) as (url, app):
        engine, follower = app.state.serving.engine, app.state.serving.follower
        assert [v.name for v in engine.versions()] == ["tiny@watch:1"]  # a state without its runs event: the folder
        second = watch / checkpoint.DIR / f"{checkpoint.PREFIX}{2:08d}"
        shutil.copytree(foreign, checkpoint.weights(second))
        (second / "state.json").write_text(json.dumps({"step": 2}))
        deadline = time.monotonic() + 60
        while not any(e["increment"] == 2 for e in follower.events):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        refused = [e for e in follower.events if e["increment"] == 2]
        assert refused[0]["event"] == "refused" and "was trained on" in refused[0]["detail"]
        r = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, temperature=0)
        assert r.model == "tiny@watch:1"
    err = [x for x in capsys.readouterr().err.splitlines() if "increment 2 not served" in x]
    assert len(err) == 1 and f"trained on {other}, not on the served base" in err[0]
