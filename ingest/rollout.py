"""The rollout runner: episodes of (environment, scripted policy) as native trajectory records.

`iter_rollouts` is pure (no lake): it plays episodes and returns the records envs/episode.py builds (the
one recorder every writer shares). `append_rollouts` writes them to a lake as one commit. `lake rollout`
(lachesis/rollout_cli.py) wires both to the command line, so a lake can be filled without a model.
"""
from __future__ import annotations

import uuid
from typing import Callable, Iterator

import envs
from ingest.rollout_config import RolloutInputError, RolloutSpec
from lake import Lake
from lake.lake import process_writer_id

__all__ = ["RolloutInputError", "RolloutSpec", "iter_rollouts", "run_rollouts", "summarize", "append_rollouts"]

SOURCE = "lachesis.ingest.rollout"


def iter_rollouts(spec: RolloutSpec) -> Iterator[dict]:
    """Episodes over consecutive tasks of the split, starting at task `seed` (wrapping), one record each."""
    name = envs.resolve_name(spec.env)
    kw: dict = {"split": spec.split, "max_steps": spec.max_steps}
    if spec.tasks_file:
        kw["tasks"] = spec.tasks_file
    if spec.templates:
        kw["templates"] = list(spec.templates)
    if spec.screenshots:
        kw["screenshots"] = spec.screenshots
    env = envs.make(name, **kw)
    policy = envs.get_policy(name, spec.policy, seed=spec.seed)
    n = env.unwrapped.suite.count(spec.split)
    if n == 0:
        env.close()
        raise ValueError(f"{name} has no {spec.split} tasks")
    group_id = f"rollout-{name}-{spec.policy}-{uuid.uuid4().hex[:8]}"
    try:
        for i in range(spec.episodes):
            yield envs.policy_record(env, policy, seed=spec.seed + i, options={"index": (spec.seed + i) % n},
                                     source=SOURCE, group_id=group_id)
    finally:
        env.close()


def run_rollouts(spec: RolloutSpec, on_episode: Callable[[dict], None] | None = None) -> list[dict]:
    records = []
    for rec in iter_rollouts(spec):
        records.append(rec)
        if on_episode:
            on_episode(rec)
    return records


def summarize(records: list[dict]) -> dict:
    n = len(records)
    return {"episodes": n, "mean_reward": sum(r["reward"] for r in records) / n if n else 0.0,
            "success_rate": sum(1 for r in records if r["success"]) / n if n else 0.0}


def append_rollouts(records: list[dict], lake_root=None):
    """Append the records to the lake's trajectories table as one commit. Like every ingest path, the
    rollout runner creates the lake when the root has none yet."""
    lake = Lake.init(lake_root)
    return lake.append("trajectories", records, writer_id=process_writer_id("rollout"))
