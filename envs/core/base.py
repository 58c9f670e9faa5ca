"""The gymnasium environment every tool-using text environment here builds on.

Action: an assistant message (text) with Hermes tool calls. Observation: text (the instruction after
reset, the tool results after a step). The episode ends when the agent calls `submit`, replies with no
tool call at all (treated as submit), or after `max_steps`; the reward comes once, at the end, from the
hidden checker. With `reward_weights` (envs/core/rewards.py) each step also earns fine-grained terms: a bonus
for a well-formed tool call, penalties for a malformed one or a failed command, partial credit and a
scaled success at the end; the default weights change nothing.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, NotRequired, TypedDict

import gymnasium
from gymnasium import spaces

from envs.core.checks import CheckReport
from envs.core.registry import tags_of
from envs.core.rewards import RewardWeights, StepTally, final_reward, step_terms
from envs.core.tasks import FAMILY_SPLIT, SPLITS, Task, TaskFileError, line_of, load_tasks_file, loaded_task, remember_tasks
from envs.sandbox.sandbox import Limits, Sandbox
from transcript.toolcalls import ToolCall, parse_tool_calls


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
    """A tool-using text task as a gymnasium environment: the agent reads text and answers with an assistant
    message whose Hermes tool calls run in the episode's sandbox; a hidden checker scores the end state.

    The main API methods a user of this class needs to know are:

    - :meth:`reset` - picks a task, opens a fresh sandbox holding its files, and returns the task's
      instruction as the first observation and a :class:`ResetInfo` (the tools, the system prompt, ...).
    - :meth:`step` - runs the tool calls of one assistant message and returns the tool results as the next
      observation, the reward, whether the episode terminated or was truncated, and a :class:`StepInfo`.
    - :meth:`render` - the transcript so far (the instruction, then each step's observation) as text.
    - :meth:`close` - closes the sandbox (its processes and its workspace); calling it twice is safe.

    And the attributes:

    - :attr:`action_space` and :attr:`observation_space` - :class:`AnyText` up to 1 MiB: any ``str``.
    - :attr:`suite` - the tasks by split (:class:`Suite`): the built-in ones, or those of a task file.
    - :attr:`task` and :attr:`box` - the current task and its :class:`~envs.sandbox.sandbox.Sandbox` (None before
      :meth:`reset` and after :meth:`close`).
    - :attr:`split`, :attr:`max_steps`, :attr:`limits`, :attr:`reward_weights` - from the constructor.

    Action contract: the text of one assistant message. Each ``<tool_call>{"name": ..., "arguments": {...}}
    </tool_call>`` block is one call (transcript/toolcalls.py; ``<think>`` blocks are the agent's reasoning and are
    not run). A block that does not parse is a malformed call, answered with an error line, never an
    exception. A message with no block at all ends the episode as ``submit`` would. Calls run in order;
    ``submit`` ends the episode and the calls after it in the same message are not run.

    Observation contract: after :meth:`reset`, the task's instruction (the system prompt and the tool schemas
    are in the info, not in the text). After :meth:`step`, one line ``error: ...`` per block that did not
    parse, then each executed call's result, joined by newlines; a final step with nothing to show says
    ``submitted: reward R``.

    Episode end: ``terminated`` when the agent submits; ``truncated`` when :attr:`max_steps` steps passed
    without a submit. On either, every process of the sandbox is stopped, :meth:`score` runs, and the step's
    reward and info carry the final result; :meth:`step` after the end raises ``RuntimeError`` until the next
    :meth:`reset`.

    Reward: the sum of ``info["reward_terms"]`` (envs/core/rewards.py): ``well_formed_call``, ``malformed_call`` and
    ``command_error`` on every step, plus ``final`` on the last one. Under the default weights the per-step
    terms are 0.0, so the reward is 0.0 until the last step, which gets the checker's reward.

    A subclass sets :attr:`env_name` (the registered name, written into task ids and trajectories),
    :attr:`tools` (OpenAI function schemas, :func:`tool_schema` and :data:`SUBMIT_SCHEMA`),
    :attr:`system_prompt`, :attr:`limits` (the sandbox's :class:`~envs.sandbox.sandbox.Limits`) and
    :attr:`sandbox_env` (environment variables of every command), and implements the hooks:

    - :meth:`builtin_suite` - the built-in tasks (required).
    - :meth:`call_tool` - run one call other than ``submit`` and return its observation (required); it raises
      :class:`ToolArgumentError` for missing or bad arguments and :class:`ToolFailed` for a call that ran and
      failed, and may pass a command's output to :meth:`remember_output` for the checker.
    - :meth:`score` - the hidden checker, on the sandbox after its processes stopped (required).
    - :meth:`validate_task` - whether a task (from a file or ``options["task"]``) carries this
      environment's checker spec (optional: accepts all).
    - :meth:`prepare` - workspace setup after the task's files are written (optional: nothing).
    """

    metadata = {"render_modes": ["ansi"]}
    end_tools: tuple[str, ...] = ("submit",)  # calls that end the episode (not run; the first one ends the step)
    max_calls_per_step: int | None = None  # calls run per step at most (the rest: one malformed-call error line)
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
        self.timings = {"reset_s": 0.0, "step_s": 0.0}  # the last reset's and step's wall time (bench_web.py)

    # ------------------------------------------------------------ tasks

    def _make_suite(self, tasks: str | list[Task] | None) -> Suite:
        if tasks is None:
            return self.builtin_suite()
        loaded = load_tasks_file(tasks) if isinstance(tasks, (str, bytes, os.PathLike)) else list(tasks)
        for t in loaded:
            if t.env and t.env != self.env_name:
                path, line = line_of(t)
                raise TaskFileError(path, line, f"task is for {t.env!r}, not {self.env_name!r}", "env")
            problem = self.validate_task(t)
            if problem:
                path, line = line_of(t)
                raise TaskFileError(path, line, problem[1], problem[0])
        loaded = [t if t.env else _with_env(t, self.env_name) for t in loaded]
        remember_tasks(loaded)  # so a policy reset with this env's info finds them by task_id
        return Suite.from_tasks(self.env_name, loaded)

    # ------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: ResetOptions | None = None) -> tuple[str, ResetInfo]:
        """Start an episode: pick a task, close the previous sandbox, open a fresh one with the task's files.

        Args:
            seed: seeds :attr:`np_random` (gymnasium's rule: once, then left alone), which picks a random task
                when ``options`` names none. The same seed picks the same task.
            options: :class:`ResetOptions`: ``task`` (a :class:`~envs.core.tasks.Task`, checked by
                :meth:`validate_task`), ``task_id``, or ``index`` within ``split`` (default: the env's split).

        Returns:
            observation (str): the task's instruction.
            info (ResetInfo): ``task_id``, ``split``, ``env``, ``tags``, ``instruction``, ``tools`` (OpenAI
            function schemas), ``system_prompt``, ``max_steps``, ``template`` ("" for file tasks) and
            ``isolation`` (the sandbox's isolation mode).

        Raises ValueError for a task without this env's checker spec or a split with no tasks, KeyError for an
        unknown ``task_id``, IndexError for an ``index`` out of range.
        """
        super().reset(seed=seed)
        task = self.pick_task(options or {})
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

    def pick_task(self, options: ResetOptions) -> Task:
        """The task `reset` starts from its options: a given ``task`` (validated, remembered for the task id),
        a ``task_id``, or task ``index`` (default a seeded random one) of ``split`` (default this env's split)."""
        split = options.get("split", self.split)
        if "task" in options:
            task = options["task"]
            problem = self.validate_task(task)
            if problem:
                raise ValueError(f"task {task.task_id!r}: field {problem[0]!r}: {problem[1]}")
            task = task if task.env else _with_env(task, self.env_name)
            remember_tasks([task])
            return task
        if "task_id" in options:
            return self.suite.find(options["task_id"])
        n = self.suite.count(split)
        if n == 0:
            raise ValueError(f"{self.env_name}: no {split} tasks")
        index = options.get("index")
        return self.suite.task(split, int(index) if index is not None else int(self.np_random.integers(n)))

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        """Run the tool calls of one assistant message (the action contract is in the class docstring).

        Returns:
            observation (str): the error lines of blocks that did not parse, then each executed call's result, then
            what the environment adds (:meth:`closing_lines` on the last step, :meth:`progress_lines` before it).
            reward (float): the sum of ``info["reward_terms"]``.
            terminated (bool): the agent submitted (an :attr:`end_tools` call or a message with no call), or the
            environment ended the task (:meth:`after_calls`).
            truncated (bool): :attr:`max_steps` steps passed without an end, or the environment failed
            (:class:`EnvironmentFault`: ``info["fault"]``).
            info (StepInfo): ``step`` (1-based), ``tool_calls`` (``[{id, name, arguments}]`` as parsed),
            ``parse_errors``, ``tool_results`` (``[{id, name, content}]``, one per executed call: an end call is not
            executed) and ``reward_terms``; on the last step also ``reward`` (the final reward), ``success``,
            ``checks`` (``{passed, total, details}``), ``task_id``, ``submitted`` and, after a fault, ``fault``.

        Raises RuntimeError before :meth:`reset` or after the episode ended.
        """
        if self._done or self.task is None:
            raise RuntimeError("call reset() before step(); the episode is over")
        t0 = time.perf_counter()
        self._steps += 1
        parsed = parse_tool_calls(action)
        tally = StepTally(malformed=len(parsed.errors))
        results = [f"error: {err}. Use <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>"
                   for err in parsed.errors]
        per_call: list[ToolResult] = []  # each tool call's own result, for transcripts with one tool turn per call
        submitted = not parsed.calls and not parsed.errors  # a plain reply ends the episode, like submit
        answer: str | None = None
        calls = parsed.calls
        cap = self.max_calls_per_step
        if cap is not None and len(calls) > cap:
            tally.malformed += 1
            results.append(f"error: {len(calls) - cap} more tool calls were not run (at most {cap} per turn)")
            calls = calls[:cap]
        fault = ""
        for call in calls:
            if call.name in self.end_tools:
                tally.well_formed += 1
                submitted = True
                a = call.arguments.get("answer")
                answer = a if isinstance(a, str) else None
                break
            try:
                text = self._call_tool(call, tally)
            except EnvironmentFault as exc:  # the environment failed, not the agent: the episode ends here
                fault = str(exc)
                break
            results.append(text)
            per_call.append({"id": call.id, "name": call.name, "content": text})
        ended, fault = self.after_calls(fault)
        if fault:
            results.append(f"error: {fault}; the episode ends")
        terminated = submitted or ended
        truncated = not terminated and (bool(fault) or self._steps >= self.max_steps)
        terms = step_terms(self.reward_weights, tally)
        terms.update(self.more_step_terms(fault))
        info: StepInfo = {"step": self._steps, "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                                             for c in parsed.calls],
                          "parse_errors": parsed.errors, "tool_results": per_call, "reward_terms": terms}
        if terminated or truncated:
            report = self.final_report(answer=answer, fault=fault)
            final = final_reward(self.reward_weights, report)
            terms["final"] = final - self.paid_before_final()
            info.update(reward=final, success=report.success, checks=report.as_dict(), task_id=self.task.task_id,
                        submitted=submitted)
            if fault:
                info["fault"] = fault
            self._done = True
            results += self.closing_lines(results, report, final, ended=ended, fault=fault)
        else:
            results += self.progress_lines()
        observation = "\n".join(results)
        self._transcript.append(observation)
        self.timings["step_s"] = time.perf_counter() - t0
        # 0.0 + each term is exact, so under the default weights the step reward is the final reward as before
        reward = float(sum(terms.values(), 0.0))
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

    # ------------------------------------------------------------ step hooks (defaults: a sandbox task)

    def after_calls(self, fault: str) -> tuple[bool, str]:
        """Hook, after a step's calls ran (`fault`: an EnvironmentFault that stopped them, else ""): (whether the
        environment itself ended the task, the fault). A sandbox task never ends itself."""
        return False, fault

    def more_step_terms(self, fault: str) -> dict[str, float]:
        """Hook: reward terms of this environment's own on every step, beside the tally's (envs/core/rewards.py)."""
        return {}

    def final_report(self, *, answer: str | None, fault: str) -> CheckReport:
        """Hook: the episode's verdict, once it ended: every process of the sandbox stopped, then :meth:`score`."""
        self.box.stop_everything()
        return self.score(self.box, self.task, last_output=self._last_output, answer=answer)

    def paid_before_final(self) -> float:
        """Hook: what the step terms already paid of the final reward (the final term pays the rest)."""
        return 0.0

    def closing_lines(self, results: list[str], report: CheckReport, reward: float, *, ended: bool,
                      fault: str) -> list[str]:
        """Hook: the lines that end the last observation: the reward, when the step shows nothing else."""
        return [] if results else [f"submitted: reward {reward:.2f}"]

    def progress_lines(self) -> list[str]:
        """Hook: the lines a step that does not end the episode adds after its calls' results (none here)."""
        return []

    def _info(self, task: Task) -> ResetInfo:
        return {"task_id": task.task_id, "split": task.split, "env": self.env_name, "tags": list(tags_of(self.env_name)),
                "instruction": task.instruction, "tools": self.tools, "system_prompt": self.system_prompt,
                "max_steps": self.max_steps, "template": task.template,
                "isolation": self.box.isolation if self.box else ""}

    def render(self) -> str | None:
        """The transcript so far: the instruction, then each step's observation, one per line."""
        return "\n".join(self._transcript)

    def close(self) -> None:
        """Close the sandbox (kill its processes, delete its workspace); the env may be reset again."""
        if self.box is not None:
            self.box.close()
            self.box = None

    # ------------------------------------------------------------ hooks

    def remember_output(self, text: str) -> None:
        """Keep a command's output for :meth:`score` (``last_output``: `output` checks read the last one)."""
        self._last_output = text

    @classmethod
    def builtin_suite(cls) -> Suite:
        """Hook: the built-in tasks by split (a :class:`Suite` whose ``generate`` builds task i on demand)."""
        raise NotImplementedError

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        """(field, message) if the task lacks this env's checker spec."""
        return None

    def prepare(self, box: Sandbox, task: Task) -> None:
        """Extra workspace setup after the files are written (git builds its history here)."""

    def call_tool(self, box: Sandbox, call: ToolCall) -> str:
        """Hook: run one call of a tool in :attr:`tools` (never ``submit``) in the sandbox; return the text the
        agent sees. Raise :class:`ToolArgumentError` for missing or bad arguments (a malformed call) and
        :class:`ToolFailed` for a call that ran and failed; both become the call's observation."""
        raise NotImplementedError

    def score(self, box: Sandbox, task: Task, *, last_output: str, answer: str | None) -> CheckReport:
        """Hook: the hidden checker, run once at the episode's end after every process of the sandbox stopped.
        ``last_output`` is what :meth:`remember_output` kept, ``answer`` the submit call's ``answer`` (None when
        there was none)."""
        raise NotImplementedError


class EnvironmentFault(RuntimeError):
    """The environment's own machinery failed, not the agent (a browser died or hung, a page threw at load): the
    episode says nothing about the policy and may be played again. reset() raises it; step() ends the episode
    (truncated) and names it in the final info's `fault` (one line). envs.core.episode.play_retrying replays such an
    episode a bounded number of times."""


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
