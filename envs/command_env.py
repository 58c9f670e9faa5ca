"""What bash_exec_env and git_repo_env share: one tool, `run`, that executes a shell command in the
sandbox; a reward from the state checks of checks.py; built-in tasks made by templates that each
return a Draft solved by one command.

Each env keeps its own templates, phrasings and workspace setup in its own file.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from envs.base import (SUBMIT_SCHEMA, ToolArgumentError, ToolEnv, ToolFailed, rng_for, str_arg, template_for,
                       tool_schema)
from envs.checks import CheckReport, run_state_checks, validate_checks
from envs.pools import Pools
from envs.sandbox import Sandbox
from envs.tasks import Task
from envs.toolcalls import ToolCall


@dataclass(frozen=True)
class Draft:
    """One template's task before it gets its id."""

    phrasing: str  # format string over the slots
    command: str  # the one `run` command that solves it (the expert's solution)
    checks: list[dict]
    slots: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # the workspace's initial files
    setup: list[str] = field(default_factory=list)  # shell commands that build the workspace (git history)


Template = Callable[[Pools, random.Random], Draft]


def command_task(env: str, templates: dict[str, Template], pools: Pools, split: str, index: int) -> Task:
    """Built-in task `index` of a split, from the template its index picks."""
    rng = rng_for(env, split, index)
    template = template_for(templates, index)
    d = templates[template](pools, rng)
    return Task(task_id=f"{env}:{split}:{index:05d}", instruction=d.phrasing.format(**d.slots), files=d.files,
                solution=[{"name": "run", "arguments": {"command": d.command}}], checker={"checks": d.checks},
                setup=d.setup, env=env, split=split, template=template, slots=d.slots, source="builtin")


def run_tools(description: str) -> list[dict]:
    """The tool list of a command env: `run` (described in the env's own words) and `submit`."""
    return [tool_schema("run", description, {"command": "the command"}), SUBMIT_SCHEMA]


class CommandEnv(ToolEnv):
    """A ToolEnv whose tasks carry `checks`; subclasses set the class attributes and builtin_suite."""

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        problem = validate_checks(task.checker.get("checks"))
        return ("checks", problem) if problem else None

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
