"""Environment registry with tags, on top of gymnasium's registry.

`register_environment` registers the entry point with gymnasium (so `gymnasium.make(name)` works too)
and records tags, a description and the task counts; `list_environments(tag)` filters by tag.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium


class _UnknownName(KeyError):
    """An unknown name of some kind; the message lists the names that exist."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.known = known
        super().__init__(f"unknown {kind} {name!r}; {kind}s: {', '.join(known) or '(none)'}")

    def __str__(self) -> str:
        return self.args[0]  # KeyError's own str() would show the message in quotes


class UnknownEnvironmentError(_UnknownName):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        super().__init__("environment", name, known)


class UnknownTagError(_UnknownName):
    def __init__(self, tag: str, known: list[str]):
        self.tag = tag
        super().__init__("tag", tag, known)


@dataclass(frozen=True)
class EnvInfo:
    name: str
    tags: tuple[str, ...]
    description: str
    entry_point: Any
    counts: Callable[[], dict[str, int]] = field(default=lambda: {})
    kwargs: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "tags": list(self.tags), "description": self.description,
                "tasks": dict(self.counts())}


_REGISTRY: dict[str, EnvInfo] = {}


def register_environment(name: str, entry_point: Any, *, tags: list[str] | tuple[str, ...] = (),
                         description: str = "", task_counts: dict[str, int] | Callable[[], dict[str, int]] | None = None,
                         kwargs: dict | None = None, max_episode_steps: int | None = None) -> EnvInfo:
    """Register an environment (class or "module:Class") with tags. Re-registering a name replaces it."""
    if name in gymnasium.registry:
        del gymnasium.registry[name]
    gymnasium.register(id=name, entry_point=entry_point, kwargs=dict(kwargs or {}),
                       max_episode_steps=max_episode_steps, disable_env_checker=True)
    if task_counts is None:
        counts: Callable[[], dict[str, int]] = lambda: _counts_of(entry_point)
    elif callable(task_counts):
        counts = task_counts
    else:
        fixed = dict(task_counts)
        counts = lambda: fixed
    info = EnvInfo(name, tuple(tags), description, entry_point, counts, dict(kwargs or {}))
    _REGISTRY[name] = info
    return info


def _counts_of(entry_point: Any) -> dict[str, int]:
    cls = entry_point
    if isinstance(entry_point, str):
        from gymnasium.envs.registration import load_env_creator

        cls = load_env_creator(entry_point)
    suite = getattr(cls, "builtin_suite", None)
    return dict(suite().counts) if suite else {}


def tags_of(name: str) -> tuple[str, ...]:
    info = _REGISTRY.get(name)
    return info.tags if info else ()


def all_tags() -> list[str]:
    return sorted({t for info in _REGISTRY.values() for t in info.tags})


def env_info(name: str) -> EnvInfo:
    if name not in _REGISTRY:
        raise UnknownEnvironmentError(name, sorted(_REGISTRY))
    return _REGISTRY[name]


def list_environments(tag: str | None = None) -> list[dict]:
    """[{name, tags, description, tasks: {train: n, test: n}}], filtered by tag when given."""
    if tag is not None and tag not in all_tags():
        raise UnknownTagError(tag, all_tags())
    return [info.as_dict() for name, info in sorted(_REGISTRY.items()) if tag is None or tag in info.tags]


def make(name: str, **kwargs: Any) -> gymnasium.Env:
    """gymnasium.make with our names; an unknown name lists the environments that exist."""
    env_info(name)
    return gymnasium.make(name, disable_env_checker=True, **kwargs)
