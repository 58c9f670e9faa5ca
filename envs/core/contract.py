"""The gymnasium contract's types: what `reset()` takes and returns beside the observation, what `step()` returns as
info, the text spaces of actions and observations, and the fault that voids an episode.

ToolEnv (envs/core/base.py) documents the contract itself (actions, observations, episode end, reward); these are
the shapes policies, the episode recorder and the trainers read.
"""
from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from gymnasium import spaces

from envs.core.tasks import Task


class ResetOptions(TypedDict, total=False):
    """`reset(options=...)`: one way to pick the task (else a seeded random task of `split`)."""

    task: Task  # run this task (validated against the env's checker spec)
    task_id: str  # a built-in id ("env:split:00042") or one from a loaded task file
    index: int  # task `index` of the split
    split: str  # the split for `index` and random picks (default: the env's split)


class ResetInfo(TypedDict):
    """What `reset()` returns beside the observation; policies and the episode recorder read it."""

    task_id: str
    split: str
    env: str
    tags: list[str]
    instruction: str  # the first observation
    tools: list[dict]  # OpenAI function schemas
    system_prompt: str
    max_steps: int
    template: str  # the built-in template the task came from ("" for file tasks)
    isolation: str  # the sandbox's isolation mode


class ToolResult(TypedDict):
    id: str  # the call's id within its action ("call_0", ...)
    name: str
    content: str


class StepInfo(TypedDict):
    """What `step()` returns as info; the keys marked NotRequired come only on the final step."""

    step: int
    tool_calls: list[dict]  # [{id, name, arguments}] as parsed from the action
    parse_errors: list[str]
    tool_results: list[ToolResult]  # one per executed call (a submit is not executed)
    reward_terms: dict[str, float]  # the step's reward by term (envs/core/rewards.py); they sum to the step's reward
    reward: NotRequired[float]  # the final reward (also info["reward_terms"]["final"])
    success: NotRequired[bool]
    checks: NotRequired[dict]  # CheckReport.as_dict(): passed, total, details
    task_id: NotRequired[str]
    submitted: NotRequired[bool]  # False when the episode was truncated
    fault: NotRequired[str]  # the environment failed, not the agent (EnvironmentFault): the episode is void


class AnyText(spaces.Text):
    """A text space that accepts any string up to max_length (gymnasium's Text checks a charset)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


class EnvironmentFault(RuntimeError):
    """The environment's own machinery failed, not the agent (a browser died or hung, a page threw at load): the
    episode says nothing about the policy and may be played again. reset() raises it; step() ends the episode
    (truncated) and names it in the final info's `fault` (one line). envs.core.episode.play_retrying replays such an
    episode a bounded number of times."""
