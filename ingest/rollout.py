"""The rollout runner: episodes of (environment, scripted policy) as native trajectory records.

`run_rollouts` is pure (no lake): it plays episodes and returns records in the lake's trajectories
contract (docs/lake-api.md). `append_rollouts` writes them to a lake as one commit. `lake rollout`
(lachesis/rollout_cli.py) wires both to the command line, so a lake can be filled without a model.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

import envs
from envs.toolcalls import parse_tool_calls

SOURCE = "lachesis.ingest.rollout"


@dataclass(frozen=True)
class RolloutSpec:
    env: str
    policy: str = "expert"
    episodes: int = 10
    split: str = "train"
    seed: int = 0
    tasks_file: str | None = None
    max_steps: int = 6
    templates: tuple[str, ...] = ()  # only these task templates (empty: all)


def _assistant(action: str, turn: int) -> tuple[dict, dict[str, str]]:
    """The assistant message (raw content plus parsed tool calls) and env call id -> trajectory call id."""
    parsed = parse_tool_calls(action)
    msg: dict = {"role": "assistant", "content": action}
    if parsed.thought:
        msg["reasoning"] = parsed.thought
    ids: dict[str, str] = {}
    if parsed.calls:
        msg["tool_calls"] = []
        for j, call in enumerate(parsed.calls):
            ids[call.id] = f"call_{turn}_{j}"
            msg["tool_calls"].append({"id": ids[call.id], "name": call.name, "arguments": call.arguments})
    return msg, ids


def run_episode(env, policy, *, policy_kind: str, seed: int, index: int | None = None,
                task_id: str | None = None, group_id: str | None = None) -> dict:
    """Play one episode and return its trajectory record."""
    options = {"task_id": task_id} if task_id else {"index": index}
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(env)
    messages: list[dict] = []
    if info.get("system_prompt"):
        messages.append({"role": "system", "content": info["system_prompt"]})
    messages.append({"role": "user", "content": obs})
    steps: list[dict] = []
    reward, final = 0.0, {}
    turn = 0
    while True:
        action = policy.act(obs, messages)
        msg, ids = _assistant(action, turn)
        messages.append(msg)
        result, r, terminated, truncated, step_info = env.step(action)
        done = bool(terminated or truncated)
        steps.append({"observation": obs, "thought": msg.get("reasoning"), "action": action, "result": result,
                      "reward": float(r), "done": done})
        if done:
            reward, final = float(r), step_info
            break
        # One tool turn per call; an unparseable action gets one tool turn with the error.
        for res in step_info.get("tool_results", []):
            messages.append({"role": "tool", "content": res["content"], "tool_call_id": ids.get(res["id"]),
                             "name": res["name"]})
        if not step_info.get("tool_results"):
            messages.append({"role": "tool", "content": result})
        obs = result
        turn += 1
    metadata = {"tools": info.get("tools"), "policy": policy_kind, "seed": seed, "template": info.get("template"),
                "max_steps": info.get("max_steps"), "isolation": info.get("isolation"),
                "checks": final.get("checks"), "submitted": final.get("submitted"), "source": SOURCE}
    if getattr(policy, "mistake", ""):
        metadata["mistake"] = policy.mistake
    return {"trajectory_id": str(uuid.uuid4()), "group_id": group_id, "task_id": info["task_id"],
            "env": info["env"], "env_tags": list(info.get("tags") or []), "split": info["split"],
            "model": f"policy:{policy_kind}", "policy_version": policy_kind, "messages": messages, "steps": steps,
            "reward": reward, "success": bool(final.get("success", reward == 1.0)), "metadata": metadata}


def iter_rollouts(spec: RolloutSpec) -> Iterator[dict]:
    """Episodes over consecutive tasks of the split, starting at task `seed` (wrapping), one record each."""
    kw = {"split": spec.split, "max_steps": spec.max_steps}
    if spec.tasks_file:
        kw["tasks"] = spec.tasks_file
    if spec.templates:
        kw["templates"] = list(spec.templates)
    env = envs.make(spec.env, **kw)
    policy = envs.get_policy(spec.env, spec.policy, seed=spec.seed)
    n = env.unwrapped.suite.count(spec.split)
    if n == 0:
        env.close()
        raise ValueError(f"{spec.env} has no {spec.split} tasks")
    group_id = f"rollout-{spec.env}-{spec.policy}-{uuid.uuid4().hex[:8]}"
    try:
        for i in range(spec.episodes):
            yield run_episode(env, policy, policy_kind=spec.policy, seed=spec.seed + i,
                              index=(spec.seed + i) % n, group_id=group_id)
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
    """Append the records to the lake's trajectories table as one commit (creating the lake if needed)."""
    from lake import Lake, resolve_root

    from lake.lake import process_writer_id

    lake = Lake.init(resolve_root(lake_root))
    return lake.append("trajectories", records, writer_id=process_writer_id("rollout"))
