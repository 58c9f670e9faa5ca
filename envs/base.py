"""The gymnasium environment every tool-using text environment here builds on.

Action: an assistant message (text) with Hermes tool calls. Observation: text (the instruction after
reset, the tool results after a step). The episode ends when the agent calls `submit`, replies with no
tool call at all (treated as submit), or after `max_steps`; the reward comes once, at the end, from the
hidden checker. With `reward_weights` (envs/rewards.py) each step also earns fine-grained terms: a bonus
for a well-formed tool call, penalties for a malformed one or a failed command, partial credit and a
scaled success at the end; the default weights change nothing.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, NotRequired, TypedDict

import gymnasium
from gymnasium import spaces

from envs.checks import CheckReport
from envs.registry import tags_of
from envs.rewards import RewardWeights, StepTally, final_reward, step_terms
from envs.sandbox import Limits, Sandbox
from envs.tasks import FAMILY_SPLIT, SPLITS, Task, TaskFileError, line_of, load_tasks_file, loaded_task, remember_tasks
from envs.toolcalls import ToolCall, parse_tool_calls


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
    reward_terms: dict[str, float]  # the step's reward by term (envs/rewards.py); they sum to the step's reward
    reward: NotRequired[float]
    success: NotRequired[bool]
    checks: NotRequired[dict]
    task_id: NotRequired[str]
    submitted: NotRequired[bool]

SUBMIT_SCHEMA = {"type": "function", "function": {
    "name": "submit", "description": "Finish the task (optionally with a text answer).",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": []}}}


def tool_schema(name: str, description: str, params: dict[str, str], required: list[str] | None = None) -> dict:
    """An OpenAI-style function schema with string parameters."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v}
                                                        for k, v in params.items()},
                       "required": list(params) if required is None else required}}}


class AnyText(spaces.Text):
    """A text space that accepts any string up to max_length (gymnasium's Text checks a charset)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


@dataclass(frozen=True)
class Suite:
    """Tasks by split: built-in ones are generated on demand from (split, index, template); file tasks are a list.

    Built-in task i of a split has template i % n of that split's templates (every template is in every slice):
    the held-out families (`held_out`) make up the test_families split and are in no other split."""

    env: str
    counts: dict[str, int]
    generate: Callable[[str, int, str], Task] | None = None
    tasks: tuple[Task, ...] = ()
    template_names: tuple[str, ...] = ()  # every template (family), held-out ones included
    only: tuple[str, ...] = ()  # keep just these templates (task ids keep their full-suite index)
    held_out: tuple[str, ...] = ()  # the families of the test_families split only

    def only_templates(self, names: list[str] | tuple[str, ...] | None) -> "Suite":
        if not names:
            return self
        unknown = [n for n in names if n not in self.template_names]
        if unknown or self.generate is None:
            raise ValueError(f"{self.env}: unknown templates {unknown}; templates: {', '.join(self.template_names)}")
        return replace(self, only=tuple(names))

    def templates_of(self, split: str) -> tuple[str, ...]:
        """The templates a split's built-in tasks cycle through (before `only`)."""
        if split == FAMILY_SPLIT:
            return self.held_out
        return tuple(t for t in self.template_names if t not in self.held_out)

    def _positions(self, split: str) -> list[int]:
        names = self.templates_of(split)
        return [i for i, n in enumerate(names) if not self.only or n in self.only]

    def count(self, split: str) -> int:
        full = self.counts.get(split, 0)
        if not self.only or self.generate is None:
            return full
        n = len(self.templates_of(split))
        return sum(-(-(full - p) // n) for p in self._positions(split) if p < full)

    def task(self, split: str, index: int) -> Task:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        n = self.count(split)
        if not 0 <= index < n:
            raise IndexError(f"{self.env}: {split} has {n} tasks, no index {index}")
        if self.generate is not None:
            names = self.templates_of(split)
            if self.only:
                pos = self._positions(split)
                q, r = divmod(index, len(pos))
                index = q * len(names) + pos[r]
            return self.generate(split, index, names[index % len(names)])
        return [t for t in self.tasks if t.split == split][index]

    def all(self, split: str) -> list[Task]:
        return [self.task(split, i) for i in range(self.count(split))]

    def find(self, task_id: str) -> Task:
        if self.generate is not None:
            parts = task_id.rsplit(":", 2)
            if len(parts) == 3 and parts[0] == self.env and parts[1] in SPLITS and parts[2].isdigit():
                return self.task(parts[1], int(parts[2]))
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        task = loaded_task(task_id, self.env)
        if task is not None:
            return task if task.env else _with_env(task, self.env)
        raise KeyError(f"{self.env}: no task {task_id!r}")

    @classmethod
    def from_tasks(cls, env: str, tasks: list[Task]) -> "Suite":
        counts = {s: sum(1 for t in tasks if t.split == s) for s in SPLITS}
        return cls(env=env, counts=counts, tasks=tuple(tasks))


class ToolEnv(gymnasium.Env):
    """Subclasses set the class attributes and implement the hooks at the bottom."""

    metadata = {"render_modes": ["ansi"]}
    env_name = ""
    tools: list[dict] = []
    system_prompt = ""
    limits = Limits()
    sandbox_env: dict[str, str] = {}

    def __init__(self, split: str = "train", tasks: str | list[Task] | None = None, max_steps: int = 6,
                 limits: Limits | None = None, render_mode: str | None = None,
                 templates: list[str] | None = None, reward_weights: RewardWeights | None = None):
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        self.split = split
        self.max_steps = int(max_steps)
        self.limits = limits or type(self).limits
        self.render_mode = render_mode
        self.reward_weights = reward_weights or RewardWeights.off()
        self.observation_space = AnyText(max_length=1 << 20)
        self.action_space = AnyText(max_length=1 << 20)
        self.suite = self._make_suite(tasks).only_templates(templates)
        self.task: Task | None = None
        self.box: Sandbox | None = None
        self._steps = 0
        self._done = True
        self._last_output = ""
        self._transcript: list[str] = []

    # ------------------------------------------------------------ tasks

    def _make_suite(self, tasks: str | list[Task] | None) -> Suite:
        if tasks is None:
            return self.builtin_suite()
        loaded = load_tasks_file(tasks) if isinstance(tasks, (str, bytes, os.PathLike)) else list(tasks)
        for t in loaded:
            if t.env and t.env != self.env_name:
                path, line = line_of(t)
                raise TaskFileError(path, line, "env", f"task is for {t.env!r}, not {self.env_name!r}")
            problem = self.validate_task(t)
            if problem:
                path, line = line_of(t)
                raise TaskFileError(path, line, problem[0], problem[1])
        loaded = [t if t.env else _with_env(t, self.env_name) for t in loaded]
        remember_tasks(loaded)  # so a policy reset with this env's info finds them by task_id
        return Suite.from_tasks(self.env_name, loaded)

    # ------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: ResetOptions | None = None) -> tuple[str, ResetInfo]:
        super().reset(seed=seed)
        options = options or {}
        split = options.get("split", self.split)
        if "task" in options:
            task = options["task"]
            problem = self.validate_task(task)
            if problem:
                raise ValueError(f"task {task.task_id!r}: field {problem[0]!r}: {problem[1]}")
            task = task if task.env else _with_env(task, self.env_name)
            remember_tasks([task])
        elif "task_id" in options:
            task = self.suite.find(options["task_id"])
        else:
            n = self.suite.count(split)
            if n == 0:
                raise ValueError(f"{self.env_name}: no {split} tasks")
            index = options.get("index")
            task = self.suite.task(split, int(index) if index is not None else int(self.np_random.integers(n)))
        if self.box is not None:
            self.box.close()
        self.task = task
        self.box = Sandbox(self.limits, env=dict(self.sandbox_env))
        self.box.write_files(task.files)
        self.prepare(self.box, task)
        self._steps = 0
        self._done = False
        self._last_output = ""
        self._transcript = [task.instruction]
        return task.instruction, self._info(task)

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        if self._done or self.task is None:
            raise RuntimeError("call reset() before step(); the episode is over")
        self._steps += 1
        parsed = parse_tool_calls(action)
        results: list[str] = []
        per_call: list[ToolResult] = []  # each tool call's own result, for transcripts with one tool turn per call
        tally = StepTally(malformed=len(parsed.errors))
        submitted = False
        answer: str | None = None
        if not parsed.calls and not parsed.errors:
            submitted = True  # a plain reply ends the episode, like submit
        for err in parsed.errors:
            results.append(f"error: {err}. Use <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>")
        for call in parsed.calls:
            if call.name == "submit":
                tally.well_formed += 1
                submitted = True
                a = call.arguments.get("answer")
                answer = a if isinstance(a, str) else None
                break
            text = self._call_tool(call, tally)
            results.append(text)
            per_call.append({"id": call.id, "name": call.name, "content": text})
        observation = "\n".join(results) if results else ""
        terminated = submitted
        truncated = not submitted and self._steps >= self.max_steps
        info: StepInfo = {"step": self._steps, "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                                    for c in parsed.calls], "parse_errors": parsed.errors,
                "tool_results": per_call, "reward_terms": step_terms(self.reward_weights, tally)}
        if terminated or truncated:
            self.box.stop_everything()
            report = self.score(self.box, self.task, last_output=self._last_output, answer=answer)
            final = final_reward(self.reward_weights, report)
            info["reward_terms"]["final"] = final
            info.update(reward=final, success=report.success, checks=report.as_dict(),
                        task_id=self.task.task_id, submitted=submitted)
            self._done = True
            if not observation:
                observation = f"submitted: reward {final:.2f}"
        self._transcript.append(observation)
        # 0.0 + each term is exact, so under the default weights the step reward is the final reward as before
        reward = float(sum(info["reward_terms"].values(), 0.0))
        return observation, reward, terminated, truncated, info

    def _call_tool(self, call: ToolCall, tally: StepTally) -> str:
        names = [t["function"]["name"] for t in self.tools]
        if call.name not in names:
            tally.malformed += 1
            return f"error: unknown tool {call.name!r}; tools: {', '.join(names)}"
        try:
            text = self.call_tool(self.box, call)
        except ToolArgumentError as exc:
            tally.malformed += 1
            return f"error: {exc}"
        except ToolFailed as exc:  # well-formed, but what it asked for failed
            tally.well_formed += 1
            tally.command_errors += 1
            return exc.observation
        tally.well_formed += 1
        return text

    def _info(self, task: Task) -> ResetInfo:
        return {"task_id": task.task_id, "split": task.split, "env": self.env_name, "tags": list(tags_of(self.env_name)),
                "instruction": task.instruction, "tools": self.tools, "system_prompt": self.system_prompt,
                "max_steps": self.max_steps, "template": task.template,
                "isolation": self.box.isolation if self.box else ""}

    def render(self) -> str | None:
        return "\n".join(self._transcript)

    def close(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None

    # ------------------------------------------------------------ hooks

    def remember_output(self, text: str) -> None:
        self._last_output = text

    @classmethod
    def builtin_suite(cls) -> Suite:
        raise NotImplementedError

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        """(field, message) if the task lacks this env's checker spec."""
        return None

    def prepare(self, box: Sandbox, task: Task) -> None:
        """Extra workspace setup after the files are written (git builds its history here)."""

    def call_tool(self, box: Sandbox, call: ToolCall) -> str:
        raise NotImplementedError

    def score(self, box: Sandbox, task: Task, *, last_output: str, answer: str | None) -> CheckReport:
        raise NotImplementedError


class ToolArgumentError(ValueError):
    """A tool call with missing or bad arguments: a malformed call (its message goes back as the result)."""


class ToolFailed(Exception):
    """A well-formed tool call whose command failed (non-zero exit, missing file, unmatched snippet): raised by
    `call_tool` with the observation the agent sees, so the step's reward can count the failure."""

    def __init__(self, observation: str):
        super().__init__(observation)
        self.observation = observation


def str_arg(call: ToolCall, key: str, *, allow_empty: bool = False) -> str:
    value = call.arguments.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ToolArgumentError(f"{call.name} needs a string argument {key!r}")
    return value


def _with_env(task: Task, env: str) -> Task:
    return replace(task, env=env)


def rng_for(env: str, split: str, index: int) -> random.Random:
    """Per-task RNG: tasks are reproducible one by one, with no global state."""
    return random.Random(f"{env}:{split}:{index}")


def builtin_id(env: str, split: str, index: int) -> str:
    """The task_id of built-in task `index` of a split (Suite.find parses it back)."""
    return f"{env}:{split}:{index:05d}"
