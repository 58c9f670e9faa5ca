"""A tiny real lake for the UI's tests (tests/test_ui_api.py, tests/test_ui_pages.py): trajectories in three
commits (so `as_of` has something to pin), a late reward, runs and an ingest error, plus hostile rows (a `<script>`
in a message, an `onerror=` attribute, a task id with quotes, a trajectory id with a slash), each row built by
transcript's one row builder and appended through the lake's writer. Seeded: the same lake every run."""
from __future__ import annotations

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
