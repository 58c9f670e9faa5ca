"""The views/*.sql definitions on a real lake snapshot: current state, sft, dpo, replay, skills."""
from __future__ import annotations

import hashlib
import json

import pytest

from tests.views_helpers import FIXTURE, chat, new_lake, seeded_trajectories, trajectory


def rows(snap, sql):
    return snap.arrow(sql).to_pylist()


def py_split(task: str, fraction: float = 0.1) -> str:
    """The documented split rule, computed without DuckDB: md5 as a little-endian integer (DuckDB md5_number)."""
    n = int.from_bytes(hashlib.md5(task.encode()).digest(), "little")
    return "test" if n % 1_000_000 < fraction * 1_000_000 else "train"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lk = new_lake(tmp_path_factory.mktemp("views") / "lake")
    recs = seeded_trajectories(300, seed=3, n_tasks=60)
    # traj-09000: a failure that a late reward turns into a good one; later events: label only.
    recs.append(trajectory(9000, "task-late", 0.2, False))
    # traj-09001 is re-sent with new content: the latest event wins.
    recs.append(trajectory(9001, "task-resent", 0.0, False, at=10))
    recs.append(trajectory(9001, "task-resent", 1.0, True, at=20, messages=chat("task-resent", True, 42)))
    # env-held-out tasks: every trajectory of them must land in test, whatever their hash says.
    recs += [trajectory(9100 + i, f"heldout-{i % 5}", 1.0, True, split="test") for i in range(10)]
    # identical chats in two tasks, one of them held out: dedup keeps one, in test.
    same = chat("dup", True, 7)
    recs.append(trajectory(9200, "dup-train", 1.0, True, messages=same, split="train"))
    recs.append(trajectory(9201, "dup-test", 0.9, True, messages=same, split="test"))
    # threshold cases
    recs.append(trajectory(9300, "thr-a", 0.6, False))
    recs.append(trajectory(9301, "thr-b", 0.3, False))
    recs.append(trajectory(9302, "thr-c", 0.1, True))
    lk.append("trajectories", recs)
    lk.append("rewards", [
        {"trajectory_id": "traj-09000", "reward": 0.95, "success": True, "label_source": "judge",
         "occurred_at": "2026-06-01T00:00:00+00:00"},
        {"trajectory_id": "traj-09000", "labels": {"quality": "good"}, "label_source": "human",
         "occurred_at": "2026-06-02T00:00:00+00:00"},
    ])
    return lk


@pytest.fixture(scope="module")
def snap(lake):
    s = lake.snapshot()
    assert not s.view_errors, s.view_errors
    yield s
    s.close()


def test_trajectories_current_latest_event_and_late_reward(snap):
    cur = {r["trajectory_id"]: r for r in rows(snap, "SELECT * FROM trajectories_current")}
    assert len(cur) == 300 + 1 + 1 + 10 + 2 + 3
    late = cur["traj-09000"]
    assert late["reward"] == 0.95 and late["success"] is True
    assert late["original_reward"] == 0.2 and late["original_success"] is False
    assert json.loads(late["labels"]) == {"quality": "good"} and late["label_source"] == "human"
    assert late["reward_events"] == 2
    resent = cur["traj-09001"]
    assert resent["success"] is True and resent["messages"][-1]["content"] == "solved task-resent (42)"
    assert cur["traj-00000"]["reward_event_id"] is None


def test_sft_threshold_success_and_variables(snap):
    def ids():
        return {r["trajectory_id"] for r in rows(snap, "SELECT trajectory_id FROM sft")}

    got = ids()
    assert {"traj-09000", "traj-09300", "traj-09302"} <= got  # late reward, reward >= 0.5, success
    assert "traj-09301" not in got
    base = rows(snap, "SELECT trajectory_id, reward, success FROM trajectories_current")
    expect_dedup_free = {r["trajectory_id"] for r in base if r["success"] or (r["reward"] or 0) >= 0.5}
    assert got <= expect_dedup_free
    snap.con.execute("SET VARIABLE sft_min_reward = 0.8")
    try:
        strict = ids()
        assert "traj-09300" not in strict and "traj-09302" in strict
        snap.con.execute("SET VARIABLE sft_use_success = false")
        assert "traj-09302" not in ids()
    finally:
        snap.con.execute("RESET VARIABLE sft_min_reward")
        snap.con.execute("RESET VARIABLE sft_use_success")
    assert ids() == got


def test_sft_dedup_by_content(snap):
    r = rows(snap, "SELECT sample_hash, count(*) AS n FROM sft GROUP BY 1 HAVING n > 1")
    assert r == []
    dup = rows(snap, "SELECT trajectory_id, split FROM sft WHERE task_id IN ('dup-train', 'dup-test')")
    assert dup == [{"trajectory_id": "traj-09201", "split": "test"}]  # the held-out copy wins


def test_sft_split_per_task_disjoint_and_reproducible(snap):
    r = rows(snap, "SELECT task_id, split, env_split FROM sft")
    by_task = {}
    for x in r:
        by_task.setdefault(x["task_id"], set()).add(x["split"])
    assert all(len(s) == 1 for s in by_task.values()), "a task is in both splits"
    for task, s in by_task.items():
        (split,) = s
        if task.startswith("heldout-") or task == "dup-test":
            assert split == "test"
        elif task == "dup-train":
            assert split == "train"
        else:
            assert split == py_split(task), task
    n_test = sum(1 for s in by_task.values() if s == {"test"})
    assert 0 < n_test < len(by_task)
    # a different fraction moves tasks only from train to test (the hash does not change)
    snap.con.execute("SET VARIABLE sft_test_fraction = 0.5")
    try:
        wide = {x["task_id"]: x["split"] for x in rows(snap, "SELECT task_id, split FROM sft")}
    finally:
        snap.con.execute("RESET VARIABLE sft_test_fraction")
    assert all(wide[t] == "test" for t, s in by_task.items() if s == {"test"})
    assert sum(v == "test" for v in wide.values()) > n_test


def test_served_conversations_train_whatever_their_hash(tmp_path):
    """Hardening IV item 9: a conversation `lake serve-model` recorded has no task, so md5(trajectory id) put one in
    ten in test, silently out of every training. It is train; a held-out share is opt-in (sft_served_test_fraction,
    the same md5 rule). A task with a trajectory from anywhere else keeps the task rule."""
    lk = new_lake(tmp_path / "lake")
    served = json.dumps({"source": "lake serve-model"})
    recs = [{**trajectory(i, None, 1.0, True), "task_id": None, "trajectory_id": f"served-{i:03d}", "metadata": served}
            for i in range(60)]
    recs.append({**trajectory(500, "mixed", 1.0, True), "metadata": served})
    recs.append({**trajectory(501, "mixed", 1.0, True), "metadata": "not json"})
    lk.append("trajectories", recs)
    ids = [f"served-{i:03d}" for i in range(60)]
    assert any(py_split(t) == "test" for t in ids)  # the old rule held some out
    with lk.snapshot() as snap:
        got = {r["trajectory_id"]: r for r in rows(snap, "SELECT trajectory_id, task_id, split, served FROM sft")}
        assert all(got[t]["split"] == "train" and got[t]["served"] for t in ids)
        assert {got[t]["split"] for t in ("traj-00500", "traj-00501")} == {py_split("mixed")}
        assert not got["traj-00501"]["served"]
        snap.con.execute("SET VARIABLE sft_split_source = 'hash'")  # served rows have no split of their own to ignore
        hashed = rows(snap, "SELECT split FROM sft WHERE starts_with(trajectory_id, 'served-')")
        assert {r["split"] for r in hashed} == {"train"}
        snap.con.execute("SET VARIABLE sft_served_test_fraction = 0.1")
        opted = {r["trajectory_id"]: r["split"] for r in rows(snap, "SELECT trajectory_id, split FROM sft")}
    assert all(opted[t] == py_split(t) for t in ids)


def test_sft_messages_are_chat_template_ready(snap):
    (r,) = rows(snap, "SELECT messages FROM sft WHERE trajectory_id = 'traj-09000'")
    msgs = r["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    call = msgs[2]["tool_calls"][0]
    assert call["type"] == "function" and call["id"] == "call_9000"
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"cmd": "run task-late 9000", "flag": None}
    assert msgs[2]["reasoning"] == "try attempt 9000"
    assert msgs[3]["tool_call_id"] == "call_9000" and msgs[3]["name"] == "bash"
    from transformers.utils.chat_template_utils import render_jinja_template
    import importlib.util
    from pathlib import Path

    # TRL's Qwen3 training template (the Hermes <tool_call> JSON format), read without importing trl.
    trl_dir = Path(importlib.util.find_spec("trl").submodule_search_locations[0])
    template = (trl_dir / "chat_templates" / "qwen3_training.jinja").read_text()
    text = render_jinja_template([msgs], chat_template=template)[0][0]
    call_text = text.split("<tool_call>\n", 1)[1].split("\n</tool_call>", 1)[0]
    assert json.loads(call_text) == {"name": "bash", "arguments": {"cmd": "run task-late 9000", "flag": None}}
    assert "<tool_response>\noutput 9000\n</tool_response>" in text
    assert "<think>\ntry attempt 9000\n</think>" in text


def test_hermes_roles_are_normalised(tmp_path):
    lk = new_lake(tmp_path / "lake")
    msgs = [{"role": "human", "content": "hi"}, {"role": "gpt", "content": "hello"}]
    lk.append("trajectories", [trajectory(1, "t", 1.0, True, messages=msgs)])
    with lk.snapshot() as s:
        (r,) = rows(s, "SELECT messages FROM sft")
    assert [m["role"] for m in r["messages"]] == ["user", "assistant"]


def test_tool_call_and_think_text_not_rendered_twice(tmp_path):
    """A writer that keeps the raw `<tool_call>` text in content next to structured tool_calls (the rollout
    runner does) must not yield chats whose template renders each call twice."""
    lk = new_lake(tmp_path / "lake")
    msgs = [{"role": "user", "content": "list files"},
            {"role": "assistant", "content": 'Looking.\n<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n</tool_call>',
             "tool_calls": [{"id": "c0", "name": "run", "arguments": {"command": "ls"}}]},
            {"role": "tool", "content": "a.txt", "tool_call_id": "c0"},
            {"role": "assistant", "content": "<think>\nls showed one file\n</think>\nThere is a.txt.",
             "reasoning": "ls showed one file"},
            {"role": "assistant", "content": "<think>kept: no structured reasoning</think> ok"}]
    lk.append("trajectories", [trajectory(1, "t", 1.0, True, messages=msgs)])
    with lk.snapshot() as s:
        (r,) = rows(s, "SELECT messages FROM sft")
    m = r["messages"]
    assert m[1]["content"] == "Looking." and m[1]["tool_calls"][0]["function"]["name"] == "run"
    assert m[3]["content"] == "There is a.txt." and m[3]["reasoning"] == "ls showed one file"
    assert m[4]["content"] == "<think>kept: no structured reasoning</think> ok"
    assert m[2]["content"] == "a.txt"


def test_dpo_pairs_same_task_and_prompt_with_gap(tmp_path):
    lk = new_lake(tmp_path / "lake")
    recs = [trajectory(i, "task-p", r, r >= 0.5) for i, r in enumerate([1.0, 0.8, 0.1, 0.0])]
    other_prompt = chat("task-p", False, 9)
    other_prompt[0] = {"role": "system", "content": "A different system prompt."}
    recs.append(trajectory(9, "task-p", 0.0, False, messages=other_prompt))
    recs.append(trajectory(20, "task-q", 0.6, True))
    recs.append(trajectory(21, "task-q", 0.5, False))  # gap 0.1 < 0.5
    for i, r in ((30, 1.0), (31, 0.0)):  # an Atropos group without task ids: the group is the task
        rec = trajectory(i, None, r, r > 0.5, messages=chat("grp", r > 0.5, i))
        rec["group_id"] = "group-1"
        recs.append(rec)
    lk.append("trajectories", recs)
    with lk.snapshot() as s:
        grp = rows(s, "SELECT chosen_trajectory_id, rejected_trajectory_id FROM dpo WHERE task_id = 'group-1'")
        assert grp == [{"chosen_trajectory_id": "traj-00030", "rejected_trajectory_id": "traj-00031"}]
        pairs = rows(s, "SELECT * FROM dpo WHERE task_id = 'task-p' ORDER BY pair_index")
        assert [(p["chosen_trajectory_id"], p["rejected_trajectory_id"]) for p in pairs] == [
            ("traj-00000", "traj-00003"), ("traj-00001", "traj-00002")]
        p = pairs[0]
        assert [m["role"] for m in p["prompt"]] == ["system", "user"]
        assert p["chosen"][0]["role"] == "assistant" and p["rejected"][0]["role"] == "assistant"
        assert p["chosen"][-1]["content"].startswith("solved") and p["rejected"][-1]["content"].startswith("gave up")
        assert p["score_gap"] == 1.0
        s.con.execute("SET VARIABLE dpo_min_gap = 0.75")
        assert len(rows(s, "SELECT * FROM dpo")) == 2  # task-p's best/worst and the group's pair
        s.con.execute("SET VARIABLE dpo_min_gap = 0.05")
        assert {p["task_id"] for p in rows(s, "SELECT * FROM dpo")} == {"task-p", "task-q", "group-1"}


def test_replay_steps_returns_and_next_observation(tmp_path):
    lk = new_lake(tmp_path / "lake")
    steps = [{"observation": f"o{k}", "thought": f"t{k}", "action": f"a{k}", "result": f"r{k}",
              "reward": [0.0, 0.0, 1.0][k], "done": None} for k in range(3)]
    bare = [{"observation": f"x{k}", "action": f"b{k}"} for k in range(2)]
    lk.append("trajectories", [trajectory(1, "t1", 1.0, True, steps=steps),
                               trajectory(2, "t2", 0.7, True, steps=bare),
                               trajectory(3, "t3", 1.0, True)])  # no steps: no rows
    with lk.snapshot() as s:
        r = rows(s, 'SELECT trajectory_id, step_index, observation, next_observation, reward, done, "return" FROM replay')
        one = [x for x in r if x["trajectory_id"] == "traj-00001"]
        assert [x["return"] for x in one] == [1.0, 1.0, 1.0]
        assert [x["next_observation"] for x in one] == ["o1", "o2", None]
        assert [x["done"] for x in one] == [False, False, True]
        two = [x for x in r if x["trajectory_id"] == "traj-00002"]
        assert [x["reward"] for x in two] == [0.0, 0.7]  # episode reward on the last step
        assert {x["trajectory_id"] for x in r} == {"traj-00001", "traj-00002"}
        s.con.execute("SET VARIABLE replay_gamma = 0.5")
        g = rows(s, "SELECT \"return\" FROM replay WHERE trajectory_id = 'traj-00001'")
        assert [x["return"] for x in g] == [0.25, 0.5, 1.0]


def test_skills_current_and_stats_with_hermes_fallback(tmp_path):
    lk = new_lake(tmp_path / "lake")
    lk.append("skills", [
        {"name": "a", "provenance": "agent", "body": "## Procedure\nv1", "occurred_at": "2026-05-01T00:00:00Z"},
        {"name": "a", "provenance": "agent", "body": "## Procedure\nv2", "occurred_at": "2026-05-02T00:00:00Z"},
        {"name": "b", "provenance": "agent", "body": "## Procedure\nb", "occurred_at": "2026-05-01T00:00:00Z"},
        {"name": "b", "event_type": "skill.delete", "deleted": True, "occurred_at": "2026-05-03T00:00:00Z"},
    ])
    lk.append("skill_usage", [
        {"name": "a", "use_count": 2, "view_count": 2, "occurred_at": "2026-05-01T00:00:00Z"},
        {"name": "a", "use_count": 0, "view_count": 6, "patch_count": 3, "occurred_at": "2026-05-02T00:00:00Z"},
        {"name": "c", "usage": {"use_count": 8, "view_count": 1, "patch_count": 0, "state": "stale"}},
    ])
    with lk.snapshot() as s:
        cur = rows(s, "SELECT name, body FROM skills_current ORDER BY name")
        assert cur == [{"name": "a", "body": "## Procedure\nv2"}]
        st = {r["name"]: r for r in rows(s, "SELECT * FROM skill_stats")}
        assert (st["a"]["uses"], st["a"]["uses_source"]) == (6, "view_count")  # the latest sidecar state
        assert (st["c"]["uses"], st["c"]["uses_source"], st["c"]["state"]) == (8, "use_count", "stale")
        s.con.execute("SET VARIABLE skill_uses_fallback = 'activity'")
        assert rows(s, "SELECT uses FROM skill_stats WHERE name = 'a'") == [{"uses": 9}]


def test_skill_sections_respect_code_fences(tmp_path):
    from views.skills import folder_connection, read_hermes_folder

    con = folder_connection(read_hermes_folder(FIXTURE / "skills"))
    secs = con.sql("SELECT heading, kind, text FROM skill_sections WHERE name = 'python-debug-loop' "
                   "ORDER BY section_index").to_arrow_table().to_pylist()
    assert [(x["heading"], x["kind"]) for x in secs] == [(None, "lead"),
        ("When to use this skill", "when_to_use"), ("Workflow", "goal"), ("Common Pitfalls", "constraints")]
    assert secs[0]["text"] == "Intro text that is not a section."  # the lead, without the "# " title
    assert "## this line is a shell comment" in secs[2]["text"] and "### Bisect tips" in secs[2]["text"]
    con.close()
