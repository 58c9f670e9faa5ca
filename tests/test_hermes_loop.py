"""The loop with the real Hermes Agent (issue 37, Must show), as docs/agents.md's "Use your trained model with Hermes
Agent" runs it: a SmolLM2 LoRA run trained here (ten steps on short answers, so that a reply sampled at temperature
1 ends before Hermes' max_tokens), then `just up --serve-model --model smollm2 --from <run>` with a lake, two
`hermes -z` conversations answered by the run's version (`smollm2@<run_id>`), each rewarded 1.0 through the lake
server's /v1/rewards, the streaming trainer's first increment with at least one step on exactly those two
conversations (`lake train status --json`, the increment's runs event: 2 new examples, none replayed), and a third
`hermes -z` conversation answered by that increment and recorded in the lake with its version
(`smollm2@<trainer serial>:1`).

Slow (SmolLM2 on a CPU, ~1,560 prompt tokens per Hermes call with --toolsets todo); Hermes lives in its own venv
($HERMES_VENV, default /tmp/hermes-venv), built by scripts/make_hermes_venv.sh when missing; skipped when it cannot
be built. The whole `just up` is stopped at the end, passed or failed: Ctrl-C to its supervisor, then SIGKILL to
whatever is left of it and of each component's session.
"""
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

from ingest_helpers import free_port, lake_cmd
from serve_model_helpers import lake_rows
from test_hermes_agent_serve import CONFIG
from test_train_watch_up import _children
from train_helpers import REPO, tiny_dir, write_jsonl  # noqa: F401  (tiny_dir: the session's LACHESIS_CACHE)

pytestmark = pytest.mark.slow

HERMES_VENV = Path(os.environ.get("HERMES_VENV", "/tmp/hermes-venv"))
HERMES = HERMES_VENV / "bin" / "hermes"
JUST = Path(sys.executable).parent / "just"
TOKEN = "hermes-loop-token"
PROMPTS = ["Plan one thing to do today.", "Name one fruit and say why you like it.", "Say hello in one sentence."]
# the run the loop continues: SmolLM2 taught to answer in a few words and stop (sampled at temperature 1 without
# it, the 135M model rambles to Hermes' max_tokens and Hermes asks it to continue with twice as many, four times)
RUN_CHATS = [{"messages": [{"role": "system", "content": "You are a helpful assistant."},
                           {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
             for q, a in [("Plan one thing to do today.", "Take a twenty-minute walk after lunch."),
                          ("Name a colour.", "Blue."), ("Say hello.", "Hello!"), ("What is 2 + 2?", "4."),
                          ("Name one animal.", "A cat."), ("Suggest a book.", 'Try "The Hobbit".'),
                          ("What day comes after Monday?", "Tuesday."),
                          ("Give me a tip for sleeping well.", "Go to bed at the same time every night.")]]


@pytest.fixture(scope="module")
def hermes():
    if not HERMES.is_file():
        built = subprocess.run(["bash", str(REPO / "scripts" / "make_hermes_venv.sh"), str(HERMES_VENV)],
                               capture_output=True, text=True, timeout=900)
        if built.returncode != 0 or not HERMES.is_file():
            last = (built.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"no Hermes Agent at {HERMES} and scripts/make_hermes_venv.sh failed: {last}")
    return HERMES


def ask_hermes(prompt: str, home: Path, cwd: Path, timeout: float = 900) -> str:
    """One `hermes -z` conversation (a harmless toolset); its final reply. Killed with its session on timeout."""
    proc = subprocess.Popen([str(HERMES), "-z", prompt, "--toolsets", "todo", "--ignore-rules"], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "HERMES_HOME": str(home)})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"hermes -z {prompt!r} did not finish in {timeout} s: {err[-2000:]}")
    assert proc.returncode == 0, (out[-500:], err[-2000:])
    assert out.strip(), err[-2000:]  # Hermes printed the model's final reply
    return out


def stop(up: subprocess.Popen) -> None:
    """Ctrl-C to `just up`'s supervisor (the recipe execs `python -m lachesis.up`), which stops each component;
    whatever is left of `just up` or of any component's session is killed."""
    supervisors = _children(up.pid)
    sessions = [c for pid in supervisors for c in _children(pid)]  # the components, each in its own session
    for pid in supervisors:
        os.kill(pid, signal.SIGINT)
    try:
        up.wait(90)
    except subprocess.TimeoutExpired:
        pass
    for pid in [up.pid, *sessions]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    up.wait(10)


def test_hermes_conversations_train_the_next_version_that_answers_hermes(hermes, tiny_dir, tmp_path):  # noqa: F811
    from trainers.modeling.pretrained import smollm2_path
    from trainers.runtime import checkpoint

    smollm2_path()  # converted once into the session's cache, before three processes want it
    t0 = time.monotonic()
    run = tmp_path / "run"
    trained = subprocess.run([sys.executable, "-m", "lachesis.train_cli", "--model", "smollm2", "--data",
                              str(write_jsonl(tmp_path / "chats.jsonl", RUN_CHATS)), "--max-steps", "10",
                              "--batch-size", "8", "--learning-rate", "1e-3", "--output", str(run), "--no-plot",
                              "--no-lake", "--quiet"],
                             capture_output=True, text=True, cwd=REPO, timeout=600)
    assert trained.returncode == 0, trained.stderr[-2000:]
    run_version = f"smollm2@{json.loads((run / 'summary.json').read_text())['run_id']}"

    lake, folder, logs = tmp_path / "lake", tmp_path / "watch-sft", tmp_path / "logs"
    port, model_port = free_port(), free_port()
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG.format(port=model_port, token=TOKEN, model="smollm2", max_tokens=256))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    # --split all: a served conversation has no split of its own, and the sft view holds one task in ten out as
    # test by its id's hash; --min-rows 2: both rewarded conversations in one increment
    up = subprocess.Popen([str(JUST), "up", "--lake", str(lake), "--port", str(port), "--skills",
                           str(tmp_path / "skills"), "--inbox", str(tmp_path / "inbox"), "--logs", str(logs),
                           "--serve-model", "--model", "smollm2", "--from", str(run), "--model-port", str(model_port),
                           "--train-args", f"--output {folder} --min-rows 2 --split all",
                           "--serve-model-args", "--poll-interval 0.2"],
                          cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, env={**os.environ, "LACHESIS_TOKEN": TOKEN})

    def log(name: str) -> str:
        path = logs / f"{name}.log"
        return path.read_text()[-3000:] if path.is_file() else f"(no {path})"

    def served() -> list[str]:
        try:
            return [m["id"] for m in httpx.get(f"http://127.0.0.1:{model_port}/v1/models", headers=auth,
                                               timeout=5).json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError):
            return []

    def wait_for(what: str, ready, timeout: float = 600):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert up.poll() is None, f"just up exited {up.returncode}: {up.stderr.read()[-2000:]}"
            if value := ready():
                return value
            time.sleep(1)
        raise AssertionError(f"{what} not within {timeout} s\nmodel:\n{log('model')}\ntrain:\n{log('train')}")

    try:
        wait_for(f"{run_version} served", lambda: run_version in served())
        t_up = time.monotonic()
        trajectories: list[str] = []
        for prompt in PROMPTS[:2]:
            ask_hermes(prompt, home, tmp_path)
            new = {r["trajectory_id"] for r in lake_rows(lake)} - set(trajectories)
            assert len(new) == 1, new  # one conversation, one trajectory
            trajectories += new
            posted = httpx.post(f"http://127.0.0.1:{port}/v1/rewards", headers=auth, timeout=30,
                                json={"trajectory_id": trajectories[-1], "reward": 1.0})
            assert posted.status_code == 200, posted.text
        t_convs = time.monotonic()
        assert {r["policy_version"] for r in lake_rows(lake)} == {run_version}

        def first_increment():
            q = subprocess.run([*lake_cmd(), "train", "status", "--runs", str(folder), "--lake", str(lake),
                                "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
            assert q.returncode == 0, q.stderr
            status = json.loads(q.stdout)
            return status and status[0]["last_increment"]

        last = wait_for("an increment", first_increment)
        assert last["increment"] == 1 and last["steps"] >= 1 and last["rows"] >= 2, last
        metrics = checkpoint.read_state(Path(last["adapter"]).parent)["event"]["metrics"]  # the increment's runs event
        assert metrics["new_examples"] == 2 and metrics["replayed_examples"] == 0, metrics  # the two conversations
        serial = json.loads((folder / "watch.json").read_text())["serial"]
        version = f"smollm2@{serial}:1"
        wait_for(f"{version} served", lambda: version in served())
        t_inc = time.monotonic()

        ask_hermes(PROMPTS[2], home, tmp_path)
        third = [r for r in lake_rows(lake) if r["trajectory_id"] not in trajectories]
        assert third and {r["policy_version"] for r in third} == {version}
        assert {r["trajectory_id"] for r in third} == {third[0]["trajectory_id"]}
        print(f"run {t_up - t0:.0f} s (trained + served), two conversations {t_convs - t_up:.0f} s, increment "
              f"served {t_inc - t_convs:.0f} s, third conversation {time.monotonic() - t_inc:.0f} s")
    finally:
        stop(up)
    assert up.returncode == 0
