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
import time

import gymnasium

from envs.core.checks import CheckReport
from envs.core.contract import AnyText, EnvironmentFault, ResetInfo, ResetOptions, StepInfo, ToolResult
from envs.core.registry import tags_of
from envs.core.rewards import RewardWeights, StepTally, final_reward, step_terms
from envs.core.task_suite import Suite, with_env
from envs.core.tasks import SPLITS, Task, TaskFileError, line_of, load_tasks_file, remember_tasks
from envs.core.tools import ToolArgumentError, ToolFailed
from envs.sandbox.limits import Limits
from envs.sandbox.sandbox import Sandbox
from transcript.toolcalls import ToolCall, parse_tool_calls


class ToolEnv(gymnasium.Env):
    """A tool-using text task as a gymnasium environment: the agent reads text and answers with an assistant
    message whose Hermes tool calls run in the episode's sandbox; a hidden checker scores the end state.

    The main API methods a user of this class needs to know are:

    - :meth:`reset` - picks a task, opens a fresh sandbox holding its files, and returns the task's
      instruction as the first observation and a :class:`~envs.core.contract.ResetInfo` (the tools, the system
      prompt, ...).
    - :meth:`step` - runs the tool calls of one assistant message and returns the tool results as the next
      observation, the reward, whether the episode terminated or was truncated, and a
      :class:`~envs.core.contract.StepInfo`.
    - :meth:`render` - the transcript so far (the instruction, then each step's observation) as text.
    - :meth:`close` - closes the sandbox (its processes and its workspace); calling it twice is safe.

    And the attributes:

    - :attr:`action_space` and :attr:`observation_space` - :class:`~envs.core.contract.AnyText` up to 1 MiB: any
      ``str``.
    - :attr:`suite` - the tasks by split (:class:`~envs.core.task_suite.Suite`): the built-in ones, or those of a
      task file.
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
    :attr:`tools` (OpenAI function schemas, :func:`~envs.core.tools.tool_schema` and
    :data:`~envs.core.tools.SUBMIT_SCHEMA`),
    :attr:`system_prompt`, :attr:`limits` (the sandbox's :class:`~envs.sandbox.limits.Limits`) and
    :attr:`sandbox_env` (environment variables of every command), and implements the hooks:

    - :meth:`builtin_suite` - the built-in tasks (required).
    - :meth:`call_tool` - run one call other than ``submit`` and return its observation (required); it raises
      :class:`~envs.core.tools.ToolArgumentError` for missing or bad arguments and
      :class:`~envs.core.tools.ToolFailed` for a call that ran and failed, and may pass a command's output to :meth:`remember_output` for the checker.
    - :meth:`score` - the hidden checker, on the sandbox after its processes stopped (required).
    - :meth:`validate_task` - whether a task (from a file or ``options["task"]``) carries this
      environment's checker spec (optional: accepts all).
    - :meth:`prepare` - workspace setup after the task's files are written (optional: nothing).
    """

    metadata = {"render_modes": ["ansi"]}
    end_tools: tuple[str, ...] = ("submit",)  # calls that end the episode (not run; the first one ends the step)
    max_calls_per_step: int | None = None  # calls run per step at most (the rest: one malformed-call error line)
    # tokens one reply may need (SmolLM2's tokenizer): the experts' longest reply with room. hermes_eval's and
    # rl_train_online's per-turn budget unless told; a budget below what the expert writes cuts the replies a
    # model that imitates it would write, and scores them as failures
    reply_tokens: int = 128
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
        loaded = [t if t.env else with_env(t, self.env_name) for t in loaded]
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
            task = task if task.env else with_env(task, self.env_name)
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
            (:class:`~envs.core.contract.EnvironmentFault`: ``info["fault"]``).
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
