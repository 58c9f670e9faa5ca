"""Scripted-policy rollouts (expert / noisy / random) as lake trajectory records, for the demo, the tests
and the SFT benchmark.

Episodes are recorded by transcript/recorder.py, the recorder `lake rollout` and hermes_eval use too, so these
rows are the rows those commands write. Episodes can run in a few processes (the sandboxed commands are
subprocesses, so the work is mostly outside Python).
"""
from __future__ import annotations

import multiprocessing as mp
import uuid

import envs

SOURCE = "lachesis.trainers.generation.rollouts"


def _worker(args) -> list[dict]:
    """(env, split, [(seed, task_id)], policy kind, group id) -> one record per task, in order."""
    env_name, split, items, kind, group_id = args
    env = envs.make(env_name, split=split)
    policy = envs.get_policy(env_name, kind, seed=0)
    try:
        return [envs.policy_record(env, policy, seed=seed, options={"task_id": tid}, source=SOURCE,
                                   group_id=group_id) for seed, tid in items]
    finally:
        env.close()


def policy_rows(env_name: str, split: str, n: int | None, policy: str = "expert", seed: int = 0,
                offset: int = 0, workers: int = 1, group_id: str | None = None) -> list[dict]:
    """Trajectory records of `policy` on the first n tasks (from `offset`) of a split, in task order; task
    `offset + i` is played with seed `seed + offset + i`."""
    env_name = envs.resolve_name(env_name)
    tasks = envs.load_tasks(env_name, split)
    sel = tasks[offset : offset + n if n else None]
    items = [(seed + offset + i, t.task_id) for i, t in enumerate(sel)]
    group_id = group_id or f"rollout-{policy}-{uuid.uuid4().hex[:8]}"
    if workers <= 1 or len(items) < 8:
        return _worker((env_name, split, items, policy, group_id))
    chunks = [items[w::workers] for w in range(workers)]
    with mp.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_worker, [(env_name, split, c, policy, group_id) for c in chunks])
    by_id = {r["task_id"]: r for part in parts for r in part}
    return [by_id[tid] for _, tid in items]


def conversations_of(records: list[dict]) -> list[dict]:
    """Records -> training rows {messages, tools, split}."""
    return [{"messages": r["messages"], "tools": r["metadata"]["tools"], "split": r["split"]} for r in records]
