"""Lachesis environments: gymnasium text environments with seeded task suites and a real sandbox.

Imports gymnasium and the stdlib only (no torch, nothing else of Lachesis), so it works on its own.

    import envs
    env = envs.make("bash_exec_env", split="test")       # or tasks="my_tasks.jsonl", max_steps=6
    obs, info = env.reset(seed=0)                         # info: task_id, split, env, tags, instruction, tools
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "run", ...}</tool_call>')
"""
from __future__ import annotations

from envs.registry import (UnknownEnvironmentError, UnknownTagError, all_tags, env_info, list_environments, make,
                           register_environment)
from envs.tasks import Task, TaskFileError, load_tasks_file
from envs.toolcalls import ParsedAction, ToolCall, format_tool_call, parse_tool_calls

__all__ = [
    "make", "list_environments", "register_environment", "load_tasks", "load_tasks_file", "parse_tool_calls",
    "format_tool_call", "get_policy", "Task", "TaskFileError", "ToolCall", "ParsedAction", "all_tags",
    "env_info", "UnknownEnvironmentError", "UnknownTagError", "builtin_suite",
]

register_environment(
    "python_debug_env", "envs.python_debug:PythonDebugEnv", tags=["python", "debug", "code"],
    description="Fix the bug in a small Python module; reward = fraction of hidden tests passing.")
register_environment(
    "bash_exec_env", "envs.bash_exec:BashExecEnv", tags=["shell", "bash"],
    description="Shell tasks over a prepared directory tree: create, find, count, transform, archive.")
register_environment(
    "git_repo_env", "envs.git_repo:GitRepoEnv", tags=["shell", "git"],
    description="Git tasks on a scripted repository: commit, branch, merge, conflicts, revert, "
                "cherry-pick, bisect, recover a branch.")


def builtin_suite(env_name: str):
    """The built-in Suite of a registered environment (count, task(split, i), find(task_id), all(split))."""
    from gymnasium.envs.registration import load_env_creator

    info = env_info(env_name)
    cls = load_env_creator(info.entry_point) if isinstance(info.entry_point, str) else info.entry_point
    return cls.builtin_suite()


def load_tasks(env_name: str, split: str, templates: list[str] | None = None) -> list[Task]:
    """Every built-in task of one split (optionally only some templates), generated deterministically."""
    return builtin_suite(env_name).only_templates(templates).all(split)


def get_policy(env_name: str, kind: str, seed: int = 0):
    """A scripted policy: "expert" (reference solution), "noisy" (realistic mistakes) or "random"."""
    from envs.policies import make_policy

    env_info(env_name)
    return make_policy(env_name, kind, seed)
