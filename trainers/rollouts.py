"""Scripted-policy rollouts (expert / noisy / random) turned into lake trajectory records.

Used by the demo to fill a fresh lake and by tests and the SFT benchmark for expert conversations. The record
shape is the lake's trajectories contract (messages, steps, env_tags, split, task_id, reward, success,
metadata.tools) and the same shape hermes_eval writes. Episodes can run in a few processes (the sandboxed
commands are subprocesses, so the work is mostly outside Python).
"""
from __future__ import annotations

import uuid


def _assistant_message(action: str, turn: int) -> dict:
    import envs

    parsed = envs.parse_tool_calls(action)
    msg = {"role": "assistant", "content": parsed.content}
    if parsed.thought:
        msg["reasoning"] = parsed.thought
    if parsed.calls:
        msg["tool_calls"] = [{"id": f"call_{turn}_{j}", "name": c.name, "arguments": c.arguments}
                             for j, c in enumerate(parsed.calls)]
    return msg


def run_episode(env, policy, env_name: str, task_id: str, seed: int, kind: str, group_id: str | None = None) -> dict:
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    policy.reset(info)
    tools = info.get("tools")
    messages = []
    if info.get("system_prompt"):
        messages.append({"role": "system", "content": info["system_prompt"]})
    messages.append({"role": "user", "content": str(obs)})
    steps, total, success, last_obs, turn = [], 0.0, False, str(obs), 0
    while True:
        action = policy.act(last_obs, messages)
        msg = _assistant_message(action, turn)
        messages.append(msg)
        obs, r, term, trunc, sinfo = env.step(action)
        total += float(r or 0.0)
        steps.append({"observation": last_obs, "thought": msg.get("content") or None, "action": action,
                      "result": str(obs), "reward": float(r or 0.0), "done": bool(term or trunc)})
        turn += 1
        if term or trunc:
            success = bool(sinfo.get("success", total >= 1.0))
            break
        call_id = (msg.get("tool_calls") or [{}])[0].get("id")
        messages.append({"role": "tool", "content": str(obs), "tool_call_id": call_id})
        last_obs = str(obs)
    return {"trajectory_id": str(uuid.uuid4()), "group_id": group_id, "task_id": task_id, "env": env_name,
            "env_tags": list(info.get("tags") or []), "split": info.get("split"), "model": f"policy:{kind}",
            "policy_version": kind, "messages": messages, "steps": steps, "reward": total, "success": success,
            "metadata": {"tools": tools, "policy": kind, "seed": seed, "source": "lachesis.trainers.rollouts"}}


def _worker(args) -> list[dict]:
    import envs

    env_name, split, task_ids, kind, seed, group_id = args
    env = envs.make(env_name, split=split)
    policy = envs.get_policy(env_name, kind, seed=seed)
    try:
        return [run_episode(env, policy, env_name, tid, seed + i, kind, group_id) for i, tid in task_ids]
    finally:
        env.close()


def policy_rows(env_name: str, split: str, n: int | None, policy: str = "expert", seed: int = 0,
                offset: int = 0, workers: int = 1, group_id: str | None = None) -> list[dict]:
    """Trajectory records of `policy` on the first n tasks (from `offset`) of a split, in task order."""
    import envs

    tasks = envs.load_tasks(env_name, split)
    sel = tasks[offset : offset + n if n else None]
    items = [(offset + i, t.task_id) for i, t in enumerate(sel)]
    group_id = group_id or f"rollout-{policy}-{uuid.uuid4().hex[:8]}"
    if workers <= 1 or len(items) < 8:
        return _worker((env_name, split, [(seed + i, tid) for i, tid in items], policy, 0, group_id))
    import multiprocessing as mp

    chunks = [[(seed + i, tid) for i, tid in items[w::workers]] for w in range(workers)]
    ctx = mp.get_context("fork")
    with ctx.Pool(workers) as pool:
        parts = pool.map(_worker, [(env_name, split, c, policy, 0, group_id) for c in chunks])
    by_id = {r["task_id"]: r for part in parts for r in part}
    return [by_id[tid] for _, tid in items]


def conversations_of(records: list[dict]) -> list[dict]:
    """Records -> training rows {messages, tools, split}."""
    return [{"messages": r["messages"], "tools": (r.get("metadata") or {}).get("tools"), "split": r.get("split")}
            for r in records]
