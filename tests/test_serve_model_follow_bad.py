"""`lake serve-model --follow` against bad increments (issue 38 items 7 and 8): a truncated or garbage
`model.safetensors`, a pickle `adapter_model.bin`, a full model's `pytorch_model.bin`, a stray `step-N.bak` copy and a
FIFO under a weights file name are each skipped with one line and a health event, and the follower goes on to the
next good increment; nothing blocks the server. At start, broken newest increments leave the last good one served.

Before: each of them killed the follower thread with a traceback (nothing in /v1/health, a good step written later
never served), a FIFO froze the whole server (health timed out, SIGTERM ignored), and at start a truncated newest
increment or a stray .bak folder was a 44-52-line traceback.

Increments are written here as the trainer writes them (a folder complete under its final name, renamed into
place), their weights a copy of the tiny model (a full model: what the tiny model's increments are).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from serve_model_helpers import running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.app import load_engine
from serving.config import ServeModelConfig
from trainers.runtime.errors import TrainerInputError


def increment(run: Path, name: str, tiny: Path, spoil=None) -> Path:
    """checkpoints/<name>/weights/ with the tiny model, spoiled by `spoil(weights)`, renamed into place at once."""
    tmp = run / "checkpoints" / f".tmp-{name}"
    shutil.copytree(tiny, tmp / "weights")
    (tmp / "state.json").write_text(json.dumps({"step": 0}))
    if spoil is not None:
        spoil(tmp / "weights")
    final = run / "checkpoints" / name
    os.replace(tmp, final)
    return final


def truncated(w: Path) -> None:
    data = (w / "model.safetensors").read_bytes()
    (w / "model.safetensors").write_bytes(data[: len(data) // 2])


def garbage(w: Path) -> None:
    (w / "model.safetensors").write_bytes(os.urandom(4096))


def pickle_adapter(w: Path) -> None:
    import torch

    (w / "model.safetensors").unlink()
    (w / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"]}))
    torch.save({"base_model.model.x.lora_A.weight": torch.zeros(2, 2)}, w / "adapter_model.bin")


def pickle_model(w: Path) -> None:
    import torch
    from safetensors.torch import load_file

    state = load_file(w / "model.safetensors")
    (w / "model.safetensors").unlink()
    torch.save(state, w / "pytorch_model.bin")


def fifo(w: Path) -> None:
    (w / "model.safetensors").unlink()
    os.mkfifo(w / "model.safetensors")


BAD = [("step-00000002", truncated), ("step-00000003", garbage), ("step-00000004", pickle_adapter),
       ("step-00000005", pickle_model), ("step-00000006", fifo)]


def new_run(tmp_path: Path) -> Path:
    run = tmp_path / "watch"
    (run / "checkpoints").mkdir(parents=True)
    (run / "watch.json").write_text(json.dumps({"config": {"eval_every": 0}}))
    return run


@pytest.mark.attack
def test_bad_increments_are_skipped_and_the_next_good_one_is_served(tiny_dir, tmp_path, capfd):
    run = new_run(tmp_path)
    increment(run, "step-00000001", tiny_dir)
    cfg = ServeModelConfig(model="tiny", follow=str(run), record="off", threads=1, poll_interval=0.05)
    with running(cfg) as (url, app):
        follower = app.state.serving.follower
        # no runs event in the increment's state: its trainer folder's name stands in for the run id
        assert [v.name for v in app.state.serving.engine.versions()] == ["tiny@watch:1"]
        capfd.readouterr()
        for name, spoil in BAD:
            increment(run, name, tiny_dir, spoil)
        shutil.copytree(run / "checkpoints" / "step-00000001", run / "checkpoints" / "step-00000007.bak")
        worst = 0.0
        deadline = time.monotonic() + 20
        while len(follower.events) < len(BAD) + 1:
            assert time.monotonic() < deadline, follower.events
            t0 = time.perf_counter()
            assert httpx.get(url + "/v1/health", timeout=5).status_code == 200
            worst = max(worst, time.perf_counter() - t0)
            time.sleep(0.05)
        increment(run, "step-00000008", tiny_dir)
        deadline = time.monotonic() + 20
        while app.state.serving.engine.versions()[-1].name != "tiny@watch:8":
            assert time.monotonic() < deadline, follower.events
            time.sleep(0.05)
        answer = httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        health = httpx.get(url + "/v1/health", timeout=5).json()
        assert follower._thread.is_alive()
    log = capfd.readouterr().err
    assert worst < 3.0, worst  # a deadline (a refused increment never holds health up), with room for a busy machine
    assert answer.status_code == 200 and answer.json()["model"] == "tiny@watch:8"
    events = {(e["increment"], e["event"]) for e in health["follow"]}
    assert events == {(2, "refused"), (3, "refused"), (4, "refused"), (5, "refused"), (6, "refused"),
                      (None, "skipped"), (8, "served")}, health["follow"]
    detail = {e["increment"]: e["detail"] for e in health["follow"]}
    assert "truncated or corrupt" in detail[2] and "truncated or corrupt" in detail[3]
    assert "pickle" in detail[4] and "adapter_model.bin" in detail[4]
    assert "pickle" in detail[5] and "pytorch_model.bin" in detail[5]
    assert "not a regular file" in detail[6]
    assert "Traceback" not in log, log
    said = [ln for ln in log.splitlines() if "not served" in ln or "skipped" in ln]
    assert len(said) == len(BAD) + 1, log


@pytest.mark.attack
@pytest.mark.parametrize("spoil", [truncated, pickle_model, "bak"])
def test_at_start_broken_newest_increments_leave_the_last_good_one_served(tiny_dir, tmp_path, capfd, spoil):
    run = new_run(tmp_path)
    increment(run, "step-00000003", tiny_dir)
    if spoil == "bak":
        shutil.copytree(run / "checkpoints" / "step-00000003", run / "checkpoints" / "step-00000004.bak")
    else:
        increment(run, "step-00000004", tiny_dir, spoil)
    cfg = ServeModelConfig(model="tiny", follow=str(run), record="off", threads=1)
    engine, follower = load_engine(cfg)
    try:
        assert [v.name for v in engine.versions()] == ["tiny@watch:3"]
        assert follower.events[0]["increment"] in (4, None) and follower.events[0]["event"] in ("refused", "skipped")
        log = capfd.readouterr().err
        said = [x for x in log.strip().splitlines() if "lake serve-model: loading " not in x]
        assert "Traceback" not in log and len(said) == 1, log  # the broken increment, one line
    finally:
        engine.close()


@pytest.mark.attack
def test_an_adapter_of_pickle_weights_is_a_one_line_error(tiny_dir, tmp_path):
    run = new_run(tmp_path)
    ckpt = increment(run, "step-00000001", tiny_dir, pickle_adapter)
    with pytest.raises(TrainerInputError, match="pickle weights are never loaded") as info:
        ServeModelConfig(model="tiny", adapter=str(ckpt / "weights"), record="off")
    assert "\n" not in str(info.value)
