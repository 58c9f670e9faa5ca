"""Online RL with actor processes (issue 15 item 3): `rl_train_online --actors 2` runs two real actor subprocesses
that append their rollouts to the lake and one learner that consumes them from the change feed. Every actor
rollout in the lake is consumed exactly once (the lake's trajectory ids against the ids the learner's steps name),
each at a step after the policy version that played it; the learner's checkpoint holds the feed offset and the
lake's consumer registry has it.

Tiny model, a few steps, 1 torch thread; the slow test kills the learner (kill -9) and resumes it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from test_train_online import B, G, _log_steps, sql, write_project, write_tasks
from test_train_online import lake_root  # noqa: F401  (fixture)
from train_helpers import REPO, tiny_dir  # noqa: F401  (session fixture)

STEPS = 2


def test_two_actors_one_learner_consume_every_rollout_exactly_once(tiny_dir, tmp_path, lake_root):
    from lake import Lake
    from trainers.runtime import checkpoint
    from trainers.rl.learner import train_online
    from trainers.rl.config import OnlineConfig

    cfg = OnlineConfig(env="shell", steps=STEPS, eval_interval=100, actors=2,
                       config=str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)),
                       tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")), output=str(tmp_path / "run"),
                       lake_root=str(lake_root), progress=False, plot=False)
    summary = train_online(cfg)
    run_id, run_dir = summary["run_id"], tmp_path / "run"
    assert summary["steps"] == STEPS

    lines = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "consumed_ids" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    consumed = Counter(i for r in steps for i in r["consumed_ids"])
    step_of = {i: r["step"] for r in steps for i in r["consumed_ids"]}

    rows = sql(lake_root, f"""SELECT trajectory_id, policy_version, json_extract(metadata, '$.actor')::INT AS actor,
                                     len(tokens) AS n_tokens, len(masks) AS n_masks FROM trajectories
                              WHERE json_extract_string(metadata, '$.train_run_id') = '{run_id}' AND split = 'train'""")
    assert rows and len(rows) % (B * G) == 0  # whole batches of batch_size tasks x group_size rollouts
    assert {r["actor"] for r in rows} == {0, 1}  # both actors wrote
    assert all(r["consumed"] >= 2 * B * G for r in steps)  # a step waits for as many batches as there are actors
    assert Counter(r["trajectory_id"] for r in rows) == consumed  # every rollout consumed, exactly once
    assert set(consumed.values()) == {1}
    for r in rows:  # played with a policy version older than the step that trained on it
        assert int(r["policy_version"]) < step_of[r["trajectory_id"]]
        assert r["n_tokens"] == r["n_masks"] > 0
    per_actor_version = Counter((r["actor"], r["policy_version"]) for r in rows)
    assert set(per_actor_version.values()) == {B * G}  # one batch per actor and policy version

    state = checkpoint.read_state(checkpoint.latest(run_dir))
    assert state["step"] == STEPS and state["lake_offset"] == steps[-1]["lake_offset"]
    assert Lake.open(lake_root).consumers()[f"rl_learner:{run_id}"]["trajectories"] == state["lake_offset"]
    assert json.loads((run_dir / "config.json").read_text())["actors"] == 2


def test_actors_draw_their_tasks_from_the_curriculum_in_the_checkpoint_they_play(tiny_dir, tmp_path, lake_root):
    """--curriculum with actor processes (issue 24 item 3): the learner observes the rollouts it consumes, each
    checkpoint carries its curriculum state, and actor k's batch of version v holds exactly the tasks that state
    draws at the actor's data position; the learner's steps report the share of groups with a signal."""
    from trainers.runtime import checkpoint
    from trainers.rl.curriculum import CurriculumStream
    from trainers.eval.evaluate import load_eval_tasks
    from trainers.rl.learner import train_online
    from trainers.rl.config import OnlineConfig

    tasks_file = str(write_tasks(tmp_path / "tasks.jsonl"))
    cfg = OnlineConfig(env="shell", steps=STEPS, eval_interval=100, actors=2, curriculum=True,
                       config=str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)),
                       tasks_file=tasks_file, output=str(tmp_path / "run"), lake_root=str(lake_root), progress=False,
                       plot=False)
    summary = train_online(cfg)
    run_id, run_dir = summary["run_id"], tmp_path / "run"
    steps = [r for r in map(json.loads, (run_dir / "train_log.jsonl").read_text().splitlines()) if "consumed_ids" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for r in steps:
        assert r["groups"] >= 2 * B and 0.0 <= r["signal_groups"] <= 1.0
        assert r["dropped_groups"] == round(r["groups"] * (1 - r["signal_groups"]))
        assert set(r["curriculum_top"]) <= {f"keep-train-{i}" for i in range(3)}
    rows = sql(lake_root, f"""SELECT task_id, policy_version, json_extract(metadata, '$.actor')::INT AS actor
                              FROM trajectories WHERE split = 'train'
                              AND json_extract_string(metadata, '$.train_run_id') = '{run_id}'""")
    played: dict[tuple[int, int], set] = {}
    for r in rows:
        played.setdefault((r["actor"], int(r["policy_version"])), set()).add(r["task_id"])
    assert played
    hp_seed = json.loads((run_dir / "config.json").read_text())["project"]["seed"]
    tasks = load_eval_tasks("shell", "train", tasks_file)
    for (actor, version), task_ids in played.items():
        stream = CurriculumStream(tasks, hp_seed, G)
        state = checkpoint.read_state(run_dir / checkpoint.DIR / f"{checkpoint.PREFIX}{version:08d}")
        assert set(state["curriculum"]["counts"]) == {f"keep-train-{i}" for i in range(3)}
        stream.load_state(state["curriculum"])
        position = (version * 2 + actor) * B
        assert task_ids == {stream.at(position + b).task_id for b in range(B)}
    final = checkpoint.read_state(checkpoint.latest(run_dir))["curriculum"]["counts"]
    assert sum(n for n, _ in final.values()) > 0  # the learner observed what it consumed


@pytest.mark.slow
def test_a_killed_learner_leaves_no_actors_and_resumes_exactly_once(tiny_dir, tmp_path, lake_root):
    """kill -9 of the learner mid-run: its actors notice and exit; --resume starts new ones, and the finished run
    has consumed every actor rollout in the lake exactly once (the killed steps' rows included)."""
    run_dir = tmp_path / "run"
    args = ["--env", "shell", "--steps", "6", "--eval_interval", "100", "--actors", "2", "--config",
            str(write_project(tmp_path / "l.toml", max_turns=1, eval_episodes=1)), "--tasks",
            str(write_tasks(tmp_path / "tasks.jsonl")), "--output", str(run_dir), "--lake", str(lake_root), "--quiet"]
    code = "from lachesis.rl_cli import rl_train_online_main as m; m()"
    env = {**os.environ, "LACHESIS_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(_consumed_steps(run_dir)) < 3:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    children = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(proc.pid)], capture_output=True, text=True)
    actors = [int(line.split()[0]) for line in children.stdout.splitlines() if "trainers.rl.actors" in line]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    end = time.time() + 60
    while time.time() < end and any(_alive(p) for p in actors):
        time.sleep(0.2)
    assert len(actors) == 2 and not any(_alive(p) for p in actors)  # each finished its batch and saw its learner gone

    res = subprocess.run([sys.executable, "-c", code, "--resume", str(run_dir), "--quiet"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    steps = _consumed_steps(run_dir)
    assert [r["step"] for r in steps] == list(range(1, 7))
    run_id = json.loads((run_dir / "summary.json").read_text())["run_id"]
    rows = sql(lake_root, f"""SELECT trajectory_id FROM trajectories WHERE split = 'train'
                              AND json_extract_string(metadata, '$.train_run_id') = '{run_id}'""")
    assert Counter(r["trajectory_id"] for r in rows) == Counter(i for r in steps for i in r["consumed_ids"])
    assert max(Counter(i for r in steps for i in r["consumed_ids"]).values()) == 1


def _consumed_steps(run_dir: Path) -> list[dict]:
    return _log_steps(run_dir / "train_log.jsonl", "consumed_ids")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_an_actor_that_fails_is_one_line_naming_its_log(tmp_path):
    """An actor that dies (here: a folder with no run in it) stops the learner with its last log line."""
    from trainers.rl.actors import ActorFailed, ActorPool

    pool = ActorPool(tmp_path, 1, 1)
    pool.start()
    pool.procs[0].wait(timeout=120)
    with pytest.raises(ActorFailed, match=r"actor 0 exited with 1: FileNotFoundError.*config\.json.*actor-0\.log"):
        pool.check()
    pool.kill()
