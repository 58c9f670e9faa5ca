"""A tiny real lake for the UI's tests (tests/test_ui_api.py, tests/test_ui_pages.py): trajectories in three
commits (so `as_of` has something to pin), a late reward, runs and an ingest error, plus hostile rows (a `<script>`
in a message, an `onerror=` attribute, a task id with quotes, a trajectory id with a slash), each row built by
transcript's one row builder and appended through the lake's writer. Seeded: the same lake every run."""
from __future__ import annotations

import json
import random
from pathlib import Path

from lake import Lake
from transcript.trajectory_row import trajectory_row

BASE = 3  # trajectories' version once the three commits are in: tests pin `as_of=BASE`, later appends aside
XSS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
HOSTILE_ID = "evil/\"quoted'<b>id</b>"
HOSTILE_TASK = "task\"'><script>document.title='pwned'</script>"
CALL_ID = "call-with-tool"
LATE_REWARDED = "a-3"  # a failure in its own row, a success by the late reward


def _row(tid: str, i: int, rng: random.Random, **cols) -> dict:
    reward = round(rng.random(), 3)
    return trajectory_row(
        trajectory_id=tid, task_id=f"task-{i % 3}", reward=reward, success=reward >= 0.5,
        messages=[{"role": "user", "content": f"question {tid}"}, {"role": "assistant", "content": f"answer {i}"}],
        steps=[{"action": f"step of {tid}", "result": "ok", "reward": reward, "done": True}], **cols)


def build_lake(root: Path) -> dict[str, dict]:
    """The lake at `root`, and {trajectory_id: its row as written, with the current reward and success} at BASE."""
    rng = random.Random(48)
    lake = Lake.init(root)
    a = [_row(f"a-{i}", i, rng, env="bash_exec_env", split="train", model="tiny", policy_version="v1")
         for i in range(10)]
    b = [_row(f"b-{i}", i, rng, env="git_repo_env", split="test", model="tiny", policy_version="v2",
              metadata={"source": "lake serve-model"} if i % 2 == 0 else None) for i in range(10)]
    c = [
        trajectory_row(trajectory_id="xss", task_id="task-x", env="web_form_env", split="train", reward=0.0,
                       success=False, messages=[{"role": "system", "content": XSS},
                                                {"role": "user", "content": XSS},
                                                {"role": "assistant", "content": XSS}]),
        trajectory_row(trajectory_id=HOSTILE_ID, task_id=HOSTILE_TASK, env="web_form_env", split="train",
                       reward=0.25, success=False, messages=[{"role": "user", "content": "quotes"}]),
        trajectory_row(
            trajectory_id=CALL_ID, task_id="count-lines-3", env="bash_exec_env", split="train", reward=1.0,
            success=True, policy_version="v2",
            messages=[{"role": "system", "content": "You run bash."},
                      {"role": "user", "content": "How many lines does notes.txt have?"},
                      {"role": "assistant", "content": '<think>wc counts lines</think>\n<tool_call>\n{"name": "bash", '
                                                       '"arguments": {"command": "wc -l < notes.txt"}}\n</tool_call>'},
                      {"role": "tool", "content": "12", "name": "bash"},
                      {"role": "assistant", "content": "It has 12 lines."}],
            steps=[{"action": "wc -l < notes.txt", "result": "12", "reward": 0.25, "done": False},
                   {"action": "answer 12", "result": "correct", "reward": 0.75, "done": True}]),
    ]
    for batch in (a, b, c):
        lake.append("trajectories", batch)
    lake.append("rewards", [{"trajectory_id": LATE_REWARDED, "reward": 0.9, "success": True}])
    lake.append("runs", [{"run_id": "run-1", "kind": "sft", "status": "finished", "model": "tiny",
                          "config": {"lr": 0.001}, "metrics": {"loss": 0.5}},
                         {"run_id": "run-2", "kind": "eval", "status": "finished", "model": "tiny"}])
    lake.append("ingest_errors", [{"reason": "line 3: " + XSS, "source_path": "inbox/bad.jsonl", "line": 3}])
    rows = {r["trajectory_id"]: dict(r) for r in a + b + c}
    rows[LATE_REWARDED].update(reward=0.9, success=True)
    assert lake.version("trajectories") == BASE
    return rows


# -- a lake of hostile rows (the attack cases of tests/test_ui_pages.py) ------------------------------------------
BIG_ID, MANY_ID, SURROGATE_ID, EVERYWHERE_ID = "big-text", "many-turns", "surrogates", "xss-everywhere"
BIG_CHARS = 5 * 1024 * 1024
MANY_TURNS = 10_000
JS_URL = "javascript:document.title='pwned'"


def build_hostile_lake(root: Path) -> dict[str, dict]:
    """A lake of four hostile trajectories, each as its writer would append it: 5 MB of markup in one turn and in
    its thinking, 10,000 turns, lone surrogates encoded as JSON escapes (the one way the lake's UTF-8 can carry
    them: the writer refuses a raw one) in a tool call's arguments and in metadata, and a `<script>`, an
    `onerror=` attribute and a `javascript:` URL in every field a page renders."""
    big = ("<b>" + "<script>x</script>" * (BIG_CHARS // 18))[:BIG_CHARS]
    evil = XSS + " " + JS_URL
    call = {"id": evil, "name": evil, "arguments": '{"command": "' + XSS.replace('"', '\\"') + '"}'}
    rows = [
        trajectory_row(trajectory_id=BIG_ID, task_id="big", env="bash_exec_env", reward=0.5, success=True,
                       messages=[{"role": "user", "content": big},
                                 {"role": "assistant", "content": "short", "reasoning": big}]),
        trajectory_row(trajectory_id=MANY_ID, task_id="many", env="bash_exec_env", reward=0.0, success=False,
                       messages=[{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
                                 for i in range(MANY_TURNS)],
                       steps=[{"action": f"a{i}", "result": "r", "reward": 0.0, "done": False}
                              for i in range(MANY_TURNS)]),
        trajectory_row(trajectory_id=SURROGATE_ID, task_id="surrogates", env="bash_exec_env",
                       metadata='{"note": "lone \\udc00 and a pair \\ud83d\\ude00"}',
                       messages=[{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "", "tool_calls": [
                                     {"id": "c1", "name": "bash", "arguments": '{"command": "echo \\ud800 x"}'}]}]),
        trajectory_row(trajectory_id=EVERYWHERE_ID, task_id=evil, env=evil, split=evil, model=evil,
                       policy_version=evil, group_id=evil, metadata={"note": evil, "url": JS_URL},
                       messages=[{"role": "system", "content": evil}, {"role": "user", "content": evil},
                                 {"role": "assistant", "content": evil, "reasoning": evil, "tool_calls": [call]},
                                 {"role": "tool", "content": evil, "name": evil, "tool_call_id": evil}],
                       steps=[{"action": evil, "result": evil, "reward": 0.5, "done": True}]),
    ]
    lake = Lake.init(root)
    lake.append("trajectories", rows)
    lake.append("runs", [{"run_id": evil, "kind": evil, "status": evil, "model": evil, "config": {"x": evil},
                          "metrics": {"loss": 0.5, "note": evil}}])
    lake.append("ingest_errors", [{"reason": evil, "source_path": evil, "field": evil}])
    return {r["trajectory_id"]: r for r in rows}


# -- runs as their writers record them (the run page's tests) ----------------------------------------------------
RL_RUN, SERIAL = "rl-1", "w1"
RL_STEPS, RL_EVAL_EVERY = 40, 10
INCREMENTS = 3


def build_runs_lake(root: Path, runs: Path) -> dict:
    """A lake and a folder of run folders holding what the trainers record, field for field:
    * an online RL run (trainers/rl/trainer.py, trainers/runtime/runfolder.py): a checkpoint event per
      RL_EVAL_EVERY steps, an eval run per checkpoint (metrics.step, metadata.train_run_id) with its episodes
      (metadata.eval_run_id), the finishing `train` event (config, manifest with the export's lake_versions,
      metadata.run_dir and adapter_sha256), and runs/rl-1/train_log.jsonl (step lines, eval lines, the summary);
    * a streaming trainer's increments (trainers/watch/loop.py: run_id `<serial>-inc-<N:06d>`, metrics.increment and
      final_loss, manifest view/after/upto, metadata.serial, adapter_sha256), each evaluated by hermes_eval --adapter
      (trainers/eval/evaluate.py: the eval run's adapter_path, its episodes' metadata.eval_run_id), and calls
      `lake serve-model` recorded from the second increment's weights (serving/record.py: metadata.adapter_sha256);
    * a run whose recorded folder is outside `runs`, and one whose train_log.jsonl is a link out of it.
    Returns what the tests compare with."""
    lake = Lake.init(root)
    rng = random.Random(7)
    run_dir = runs / RL_RUN
    run_dir.mkdir(parents=True)
    log = [{"step": s, "loss": round(2.0 / s, 4), "lr": 1e-5} for s in range(1, RL_STEPS + 1)]
    evals, episodes, events = [], [], []
    for step in range(RL_EVAL_EVERY, RL_STEPS + 1, RL_EVAL_EVERY):
        eval_id = f"{RL_RUN}-eval-{step:06d}"
        rate = round(0.2 + step / 100, 3)
        log.append({"eval": True, "step": step, "success_rate": rate, "mean_reward": rate})
        eps = [trajectory_row(trajectory_id=f"{eval_id}-ep{j}", task_id=f"task-{j}", env="bash_exec_env",
                              split="test", policy_version=str(step), group_id=eval_id, reward=float(j % 2),
                              success=j % 2 == 1, messages=[{"role": "user", "content": f"eval {j}"}],
                              metadata={"eval_run_id": eval_id, "train_run_id": RL_RUN, "step": step})
               for j in range(4)]
        episodes += eps
        evals.append({"run_id": eval_id, "kind": "eval", "status": "completed", "model": "tiny", "config": {},
                      "metrics": {"success_rate": rate, "mean_reward": rate, "episodes": 4, "step": step,
                                  "policy_version": step, "train_run_id": RL_RUN},
                      "metadata": {"train_run_id": RL_RUN, "step": step, "env": "bash_exec_env", "split": "test"}})
        events.append({"run_id": RL_RUN, "kind": "checkpoint", "status": "completed", "model": "tiny",
                       "adapter_path": str(run_dir / f"checkpoints/step-{step:08d}/weights"),
                       "config": {"lr": 1e-5}, "metrics": {"step": step},
                       "metadata": {"env": "bash_exec_env", "step": step, "run_dir": str(run_dir)}})
    log.append({"summary": True, "final_loss": log[RL_STEPS - 1]["loss"]})
    (run_dir / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    lake.append("trajectories", episodes)
    lake.append("runs", evals + events)
    trained_on = {"trajectories": 1, "runs": 0}
    lake.append("runs", [{"run_id": RL_RUN, "kind": "train", "status": "completed", "model": "tiny",
                          "adapter_path": str(run_dir / "adapter"), "config": {"lr": 1e-5, "steps": RL_STEPS},
                          "metrics": {"final_loss": log[RL_STEPS - 1]["loss"]},
                          "manifest": {"view": "sft", "lake_versions": trained_on, "row_count": 12,
                                       "event_ids_sha256": "ab" * 32},
                          "metadata": {"run_dir": str(run_dir), "trainer": "online", "method": "online",
                                       "adapter_sha256": "rl" * 32}}])
    # the streaming trainer
    w_dir = runs / "watch" / SERIAL
    w_dir.mkdir(parents=True)
    incs, inc_evals, inc_eps = [], [], []
    for n in range(1, INCREMENTS + 1):
        weights = str(w_dir / f"checkpoints/step-{n:08d}/weights")
        incs.append({"run_id": f"{SERIAL}-inc-{n:06d}", "kind": "train", "status": "completed", "model": "tiny",
                     "adapter_path": weights, "config": {"lr": 2e-5},
                     "metrics": {"increment": n, "rows": 5 * n, "final_loss": round(1.0 / n, 3)},
                     "manifest": {"view": "sft", "after": {"trajectories": n - 1}, "upto": {"trajectories": n}},
                     "metadata": {"serial": SERIAL, "increment": n, "run_dir": str(w_dir),
                                  "adapter_sha256": f"{n:02d}" * 32}})
        eval_id = f"eval-{SERIAL}-{n}"
        inc_evals.append({"run_id": eval_id, "kind": "eval", "status": "completed", "model": "tiny",
                          "adapter_path": weights, "metrics": {"success_rate": 0.1 * n, "mean_reward": 0.1 * n,
                                                               "episodes": 2}})
        inc_eps += [trajectory_row(trajectory_id=f"{eval_id}-ep{j}", task_id="t", env="bash_exec_env", split="test",
                                   policy_version=weights, reward=0.5, success=True,
                                   messages=[{"role": "user", "content": "q"}],
                                   metadata={"eval_run_id": eval_id, "adapter": weights}) for j in range(2)]
    served = [trajectory_row(trajectory_id=f"served-{i}", model="tiny", policy_version=f"tiny@{SERIAL}:2",
                             reward=round(rng.random(), 3), success=i % 3 == 0,
                             messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                             metadata={"source": "lake serve-model", "adapter_sha256": "02" * 32})
              for i in range(6)]
    lake.append("runs", incs + inc_evals)
    lake.append("trajectories", inc_eps + served)
    # a folder outside the runs folder, and a log that is a link out of it
    link_dir = runs / "linked"
    link_dir.mkdir()
    (link_dir / "train_log.jsonl").symlink_to(run_dir / "train_log.jsonl")
    lake.append("runs", [{"run_id": "outside", "kind": "train", "status": "completed",
                          "metadata": {"run_dir": "/etc"}},
                         {"run_id": "linked", "kind": "train", "status": "completed",
                          "metadata": {"run_dir": str(link_dir)}},
                         {"run_id": "climbs", "kind": "train", "status": "completed",
                          "metadata": {"run_dir": str(runs / RL_RUN / ".." / ".." / "etc")}}])
    return {"evals": [e["run_id"] for e in evals], "episodes": [e["trajectory_id"] for e in episodes],
            "log": log, "trained_on": trained_on, "increments": [i["run_id"] for i in incs],
            "served": [s["trajectory_id"] for s in served]}


# -- skills as `lake watch` reads a Hermes folder, and trajectories that used them (the skills page's tests) -------
SKILL_USERS = {"deploy-check": (6, 5), "quick-notes": (4, 1)}  # skill: (trajectories that used it, successes)


def add_skills(root: Path) -> dict[str, list[str]]:
    """Into the lake at `root`: the shared Hermes skills fixture (tests/data/hermes_skills_views, through the
    watcher as `lake watch` ingests it: tests/views_helpers.py) and trajectories that used two of its skills (the
    writer's own record, metadata.skills_used: views/skill_uses.sql) beside 10 in the same env without one.
    Returns {skill: the trajectories that used it}."""
    from tests.views_helpers import FIXTURE, ingest_skills_folder

    lake = Lake.open(root)
    ingest_skills_folder(lake, FIXTURE / "skills")
    rows, used = [], {}
    for skill, (n, wins) in SKILL_USERS.items():
        for i in range(n):
            tid = f"uses-{skill}-{i}"
            used.setdefault(skill, []).append(tid)
            rows.append(trajectory_row(trajectory_id=tid, env="skills_env", task_id=f"s{i}", success=i < wins,
                                       reward=1.0 if i < wins else 0.0, messages=[{"role": "user", "content": "go"}],
                                       metadata={"skills_used": [skill]}))
    rows += [trajectory_row(trajectory_id=f"no-skill-{i}", env="skills_env", task_id=f"s{i}", success=i < 3,
                            reward=1.0 if i < 3 else 0.0, messages=[{"role": "user", "content": "go"}])
             for i in range(10)]
    lake.append("trajectories", rows)
    return used
