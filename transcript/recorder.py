"""One episode -> one trajectory record: how every record the lake's trajectories table gets from an environment
is made (`lake rollout`, hermes_eval, the demo's rollouts and every trainer that plays episodes), through the one
row builder (trajectory_row.py) the importers and the model server use too.

A caller resets the environment, hands the observation and the reset info to an `EpisodeRecorder`, then
passes it every step's action and the environment's answer (`add_step`); `record(...)` returns the
record. envs/core/episode.py's `play(env, policy, ...)` is that loop for a scripted policy; hermes_eval
drives the same recorder one generated reply at a time.

The infos are the environment contract's (envs/core/contract.py `ResetInfo`, `StepInfo`), read here as mappings so
that the message model imports nothing of ours. Read at reset: system_prompt, tools, template, max_steps,
isolation, task_id, env, tags, split; on a step: tool_results, parse_errors; on the final step: success,
checks, submitted.

The rules (one place, so every writer's rows are alike):
- messages: the system prompt (if any), the user turn (the first observation), then per step the
  assistant message and its tool turns.
- assistant message: `content` is what the policy wrote minus what became structure: the `<think>`
  block goes to `reasoning`, each `<tool_call>` block that parsed goes to `tool_calls`
  [{id, name, arguments}] (the message model's `assistant_message`, transcript/messages.py: the one parser,
  ids `call_{turn}_{j}`); a malformed block stays in `content`. The chat template renders such a message
  back to the same text, without a tool call twice, and the Hermes, Atropos and native importers and the
  model server make the same message of the same text. The raw text, byte for byte, is the step's `action`.
- tool turns: one `tool` message per executed call (`tool_call_id` and `name` of that call); an action
  with a malformed block (or an environment without per-call results) gets one tool message with the
  whole observation. The final step adds none: its observation is in the last step's `result`.
- steps: {observation (before the action), thought (the reasoning), action (raw), result, reward, done}.
- reward: the episode's return, the sum of the step rewards. success: the environment's own `success`
  flag on its final step; an episode the caller cut short (turn or context limit) is not a success.
- metadata: tools, seed, template, max_steps, isolation, checks, submitted, source (the writer), plus
  the caller's extras (policy notes, eval run id, adapter).
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from transcript.messages import assistant_message
from transcript.trajectory_row import trajectory_row


def tool_messages(assistant: dict, observation: str, info: Mapping[str, Any]) -> list[dict]:
    """The tool turns that answer one non-final step (see the module's rules)."""
    results = info.get("tool_results") or []
    if not results or info.get("parse_errors"):
        return [{"role": "tool", "content": observation}]
    # The env numbers a step's calls call_0, call_1, ... in the order the recorder numbered them.
    ids = {f"call_{j}": c["id"] for j, c in enumerate(assistant.get("tool_calls") or [])}
    return [{"role": "tool", "content": r["content"], "tool_call_id": ids[r["id"]], "name": r["name"]}
            for r in results]


class EpisodeRecorder:
    """Collects one episode's messages and steps; `record()` is the trajectory record."""

    def __init__(self, observation: str, info: Mapping[str, Any]):
        self.info = info
        self.messages: list[dict] = []
        if info["system_prompt"]:
            self.messages.append({"role": "system", "content": info["system_prompt"]})
        self.messages.append({"role": "user", "content": observation})
        self.steps: list[dict] = []
        self.final: Mapping[str, Any] | None = None  # the environment's info on the step that ended the episode
        self.cut = False  # the caller stopped the episode before the environment ended it
        self._observation = observation

    @property
    def done(self) -> bool:
        return self.final is not None or self.cut

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def reward(self) -> float:
        return sum(s["reward"] for s in self.steps)

    @property
    def success(self) -> bool:
        return bool(self.final is not None and self.final.get("success", False))

    def add_step(self, action: str, observation: str, reward: float, terminated: bool, truncated: bool,
                 info: Mapping[str, Any]) -> list[dict]:
        """Record one step; returns the tool messages it added (none on the final step)."""
        if self.done:
            raise RuntimeError("the episode is over")
        msg = assistant_message(action, len(self.steps))
        done = bool(terminated or truncated)
        self.messages.append(msg)
        self.steps.append({"observation": self._observation, "thought": msg.get("reasoning"), "action": action,
                           "result": observation, "reward": float(reward), "done": done})
        self._observation = observation
        if done:
            self.final = info
            return []
        tools = tool_messages(msg, observation, info)
        self.messages.extend(tools)
        return tools

    def stop(self) -> None:
        """End the episode here although the environment did not (a turn or context limit)."""
        if not self.done:
            self.cut = True

    def record(self, *, model: str, policy_version: str, source: str, group_id: str | None = None,
               seed: int | None = None, metadata: dict | None = None, trajectory_id: str | None = None) -> dict:
        """The trajectory record (the lake's trajectories contract, docs/lake-api.md); `trajectory_id` a new
        UUID unless the caller names the episode (a resumable rollout: the same episode, the same id)."""
        info, final = self.info, self.final or {}
        meta = {"tools": info["tools"], "seed": seed, "template": info["template"], "max_steps": info["max_steps"],
                "isolation": info["isolation"], "checks": final.get("checks"), "submitted": final.get("submitted"),
                "source": source, **(metadata or {})}
        return trajectory_row(trajectory_id=trajectory_id or str(uuid.uuid4()), group_id=group_id, task_id=info["task_id"],
                              env=info["env"], env_tags=list(info["tags"]), split=info["split"], model=model,
                              policy_version=policy_version, messages=self.messages, steps=self.steps,
                              reward=self.reward, success=self.success, metadata=meta)
