"""`just up --serve-model` (issue 25, item 5): the model server joins the lake server, the watcher and the streaming
trainer, `--follow`ing the trainer's own folder (serving the base until the trainer has written it); the whole loop
(rows in the lake -> an increment -> served -> a call recorded with that version) runs under `just up`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ingest_helpers import free_port
from lachesis.up import UpConfig, components

REPO = Path(__file__).resolve().parent.parent


def test_serve_model_follows_the_trainers_folder(tmp_path):
    cfg = UpConfig(serve_model=True, port=free_port(), model_port=free_port(), train_args=f"--output {tmp_path / 'w'}")
    comps = {c.name: c for c in components(cfg, tmp_path / "lake")}
    assert set(comps) == {"serve", "watch", "train", "model"}
    model = comps["model"]
    argv = model.argv[model.argv.index("serve-model"):]
    assert argv[argv.index("--follow") + 1] == str(tmp_path / "w") and "--port" in argv
    assert argv[argv.index("--port") + 1] == str(cfg.model_port)
    assert UpConfig(serve_model=True, train_args="--name=mine").trainer_folder() == Path("runs/mine")
    assert UpConfig(serve_model=True).trainer_folder() == Path("runs/watch-sft")  # the trainer's own default
    assert "model" not in {c.name for c in components(UpConfig(), tmp_path / "lake")}
    with pytest.raises(ValueError, match="drop --no-train"):
        UpConfig(serve_model=True, no_train=True)
    with pytest.raises(ValueError, match="is the lake server's --port"):
        UpConfig(serve_model=True, port=9100, model_port=9100)


def test_from_starts_the_trainer_from_the_run_and_the_server_on_it(tmp_path):
    """Issue 37, item 2: `just up --from runs/<run>` gives the trainer `--from` and the model server `--adapter`
    (the run served until the trainer's first increment), under --model's served name."""
    from trainers.runtime.errors import TrainerInputError

    run = tmp_path / "run"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text("{}")
    cfg = UpConfig(serve_model=True, model="smollm2", from_run=str(run), port=free_port(), model_port=free_port())
    comps = {c.name: c.argv for c in components(cfg, tmp_path / "lake")}
    train, model = comps["train"], comps["model"]
    assert train[train.index("--from") + 1] == str(run) and train[train.index("--model") + 1] == "smollm2"
    assert model[model.index("--adapter") + 1] == str(run) and model[model.index("--follow") + 1] == "runs/watch-sft"
    assert "--from" not in comps["serve"] + comps["watch"]
    with pytest.raises(TrainerInputError, match="--from .*no-such-run"):
        UpConfig(from_run=str(tmp_path / "no-such-run"))
    with pytest.raises(ValueError, match="drop --no-train"):
        UpConfig(from_run=str(run), no_train=True)


@pytest.mark.slow
def test_up_serve_model_serves_each_increment_and_records_its_calls(tmp_path):
    from serve_model_helpers import lake_rows
    from views_helpers import seeded_trajectories

    from lake import Lake

    lake_root, folder, model_port = tmp_path / "lake", tmp_path / "watch", free_port()
    up = subprocess.Popen([sys.executable, "-m", "lachesis.up", "--lake", str(lake_root), "--port", str(free_port()),
                           "--skills", str(tmp_path / "skills"), "--inbox", str(tmp_path / "inbox"),
                           "--logs", str(tmp_path / "logs"), "--serve-model", "--model-port", str(model_port),
                           "--serve-model-args", "--threads 1 --poll-interval 0.2",
                           "--train-args", f"--output {folder} --split all --max-steps 1 --batch-size 4 --threads 1"],
                          cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{model_port}"
    try:
        def wait_for(version: str, timeout: float = 300) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                assert up.poll() is None, up.stderr.read()
                try:
                    if version in [m["id"] for m in httpx.get(url + "/v1/models", timeout=2).json()["data"]]:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            raise AssertionError(f"{version} not served: {(tmp_path / 'logs' / 'model.log').read_text()[-2000:]}")

        wait_for("tiny@base")
        rows = seeded_trajectories(8, seed=3)
        for r in rows:
            r["success"], r["reward"] = True, 1.0
        Lake.open(lake_root).append("trajectories", rows)
        deadline = time.monotonic() + 300
        while not (folder / "watch.json").is_file():
            assert time.monotonic() < deadline and up.poll() is None
            time.sleep(0.2)
        v1 = f"tiny@{json.loads((folder / 'watch.json').read_text())['serial']}:1"  # the trainer's run id
        wait_for(v1)
        answer = httpx.post(url + "/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, timeout=120).json()
        assert answer["model"] == v1
        served = [r for r in lake_rows(lake_root, "policy_version IS NOT NULL")]
        assert [r["policy_version"] for r in served] == [v1]
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
    assert up.returncode == 0
