"""Tasks by environment name: the built-in suite of a registered ToolEnv, its tasks, one task by id, and
the registry listing with task counts.

It sits above both the registry (names, tags, entry points; gymnasium only) and base.py (ToolEnv; its Suite is
task_suite.py's), so neither of those imports the other's upper half.
"""
from __future__ import annotations

from envs.core.base import ToolEnv
from envs.core.registry import EnvInfo, env_info, registered
from envs.core.task_suite import Suite
from envs.core.tasks import Task, loaded_task


def tool_env_class(info: EnvInfo) -> type[ToolEnv] | None:
    """The registered environment's ToolEnv class; None when its entry point is another class or a factory."""
    cls = info.env_class()
    return cls if isinstance(cls, type) and issubclass(cls, ToolEnv) else None


def builtin_suite(env_name: str) -> Suite:
    """The built-in Suite of a registered environment (count, task(split, i), find(task_id), all(split))."""
    info = env_info(env_name)
    cls = tool_env_class(info)
    if cls is None:
        raise TypeError(f"{info.name} is not a ToolEnv: it has no built-in task suite")
    return cls.builtin_suite()


def load_tasks(env_name: str, split: str, templates: list[str] | None = None) -> list[Task]:
    """Every built-in task of one split (optionally only some templates), generated deterministically."""
    return builtin_suite(env_name).only_templates(templates).all(split)


def find_task(env_name: str, task_id: str) -> Task:
    """A task by id: one this process loaded or gave an environment of `env_name`, else a built-in one."""
    task = loaded_task(task_id, env_info(env_name).name)
    return task if task is not None else builtin_suite(env_name).find(task_id)


def reply_tokens(env_name: str) -> int:
    """Tokens one reply of this environment may need (ToolEnv.reply_tokens; 128 for an environment that is not a
    ToolEnv): the per-turn budget of evaluation and online RL unless a setting names one."""
    cls = tool_env_class(env_info(env_name))
    return (cls or ToolEnv).reply_tokens


def task_counts(info: EnvInfo) -> dict[str, int]:
    if info.counts is not None:
        return info.counts()
    cls = tool_env_class(info)
    return dict(cls.builtin_suite().counts) if cls is not None else {}


def list_environments(tag: str | None = None) -> list[dict]:
    """[{name, tags, aliases, description, tasks: {train: n, test: n}}], filtered by tag when given."""
    return [{"name": i.name, "tags": list(i.tags), "aliases": list(i.aliases), "description": i.description,
             "tasks": task_counts(i)} for i in registered(tag)]
