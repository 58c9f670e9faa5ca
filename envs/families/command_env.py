"""What bash_exec_env and git_repo_env share: one tool, `run`, that executes a shell command in the
sandbox; a reward from the state checks of checks.py; built-in tasks made by templates that each
return a Draft solved by one command.

Each env keeps its own templates, phrasings and workspace setup in its own file.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from envs.core.base import ToolEnv
from envs.core.checks import CheckReport, run_state_checks, validate_checks
from envs.core.pools import Pools
from envs.core.task_suite import builtin_id, rng_for
from envs.core.tasks import Task
from envs.core.tools import SUBMIT_SCHEMA, ToolArgumentError, ToolFailed, str_arg, tool_schema
from envs.sandbox.sandbox import Sandbox
from transcript.toolcalls import ToolCall


@dataclass(frozen=True)
class Draft:
    """One template's task before it gets its id."""

    phrasing: str  # format string over the slots
    command: str  # the `run` command that solves it (the expert's solution, after `before`)
    checks: list[dict]
    slots: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # the workspace's initial files
    setup: list[str] = field(default_factory=list)  # shell commands that build the workspace (git history)
    # Multi-step tasks: the expert's commands before `command`, when one command is not the whole story (the
    # first one fails and its error says what to do next, or an output must be read before acting).
    before: tuple[str, ...] = ()


Template = Callable[[Pools, random.Random], Draft]


def command_task(env: str, templates: dict[str, Template], pools: Pools, split: str, index: int,
                 template: str) -> Task:
    """Built-in task `index` of a split, from `template` (the one Suite.task picks for the index)."""
    rng = rng_for(env, split, index)
    d = templates[template](pools, rng)
    solution = [{"name": "run", "arguments": {"command": c}} for c in (*d.before, d.command)]
    return Task(task_id=builtin_id(env, split, index), instruction=d.phrasing.format(**d.slots), files=d.files,
                solution=solution, checker={"checks": d.checks},
                setup=d.setup, env=env, split=split, template=template, slots=d.slots, source="builtin")


def cmd(argv: list[str], stdout: str | None = None, returncode: int | None = 0) -> dict:
    """A `command` check: argv run by the checker (system PATH, clean environment) in the workspace."""
    c: dict = {"type": "command", "argv": argv}
    if stdout is not None:
        c["stdout"] = stdout
    if returncode is not None:
        c["returncode"] = returncode
    return c


def sh(script: str) -> dict:
    """A `command` check that a /bin/sh script exits 0."""
    return cmd(["/bin/sh", "-c", script])


def run_tools(description: str) -> list[dict]:
    """The tool list of a command env: `run` (described in the env's own words) and `submit`."""
    return [tool_schema("run", description, {"command": "the command"}), SUBMIT_SCHEMA]


class CommandEnv(ToolEnv):
    """A ToolEnv whose tasks carry `checks`; subclasses set the class attributes and builtin_suite."""

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        problem = validate_checks(task.checker.get("checks"))
        return ("checks", problem) if problem else None

    def prepare(self, box: Sandbox, task: Task) -> None:
        """Run the task's setup (an archive to unpack, a repository's history) before the agent's first command."""
        if not task.setup:
            return
        result = box.run("set -e\n" + "\n".join(task.setup), timeout_s=30)
        if result.exit_code != 0:
            raise RuntimeError(f"{task.task_id}: workspace setup failed: {result.observation()[-500:]}")

    def call_tool(self, box: Sandbox, call: ToolCall) -> str:
        if call.name != "run":
            raise ToolArgumentError(f"unknown tool {call.name!r}")
        result = box.run(str_arg(call, "command"))
        self.remember_output(result.output)  # `output` checks look at the last command's output
        if not result.ok:  # a non-zero exit, a timeout or a kill: a command error for the step's reward
            raise ToolFailed(result.observation())
        return result.observation()

    def score(self, box: Sandbox, task: Task, *, last_output: str, answer: str | None) -> CheckReport:
        return run_state_checks(box, task.checker["checks"], last_output=last_output, answer=answer)
