"""Environment registry with tags and aliases, on top of gymnasium's registry.

`register_environment` registers the entry point with gymnasium (so `gymnasium.make(name)` works too)
and records tags, a description, the task counts and the short names users type (`debug-python`,
`shell`, `git`). Every command that takes an environment name (`lake rollout --env`, `hermes_eval
--task`, `envs.make`) resolves it here, so an alias that works in one works in all of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium
from gymnasium.envs.registration import load_env_creator

from ground.errors import UserError


class _UnknownName(UserError, KeyError):
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
    counts: Callable[[], dict[str, int]] | None = None  # None: the env class's built-in suite counts
    kwargs: dict = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    def env_class(self) -> type:
        """The class (or factory) gymnasium makes; a "module:Class" entry point is imported here."""
        return load_env_creator(self.entry_point) if isinstance(self.entry_point, str) else self.entry_point


_REGISTRY: dict[str, EnvInfo] = {}
_ALIASES: dict[str, str] = {}  # alias -> registered name


def register_environment(name: str, entry_point: Any, *, tags: list[str] | tuple[str, ...] = (),
                         description: str = "", task_counts: dict[str, int] | Callable[[], dict[str, int]] | None = None,
                         kwargs: dict | None = None, max_episode_steps: int | None = None,
                         aliases: list[str] | tuple[str, ...] = ()) -> EnvInfo:
    """Register an environment (class or "module:Class") with tags and aliases. Re-registering a name
    replaces it; an alias may not shadow a registered name."""
    clash = [a for a in aliases if (a in _REGISTRY and a != name) or _ALIASES.get(a, name) != name]
    if clash:
        raise ValueError(f"alias {clash[0]!r} is already an environment name or another environment's alias")
    unregister(name)
    gymnasium.register(id=name, entry_point=entry_point, kwargs=dict(kwargs or {}),
                       max_episode_steps=max_episode_steps, disable_env_checker=True)
    if task_counts is None or callable(task_counts):
        counts = task_counts
    else:
        fixed = dict(task_counts)
        counts = lambda: dict(fixed)  # noqa: E731
    info = EnvInfo(name, tuple(tags), description, entry_point, counts, dict(kwargs or {}), tuple(aliases))
    _REGISTRY[name] = info
    _ALIASES.update((a, name) for a in aliases)
    return info


def unregister(name: str) -> None:
    """Forget an environment and its aliases (tests register throwaway environments)."""
    info = _REGISTRY.pop(name, None)
    for a in info.aliases if info else ():
        _ALIASES.pop(a, None)
    if name in gymnasium.registry:
        del gymnasium.registry[name]


def resolve_name(name: str) -> str:
    """The registered name for a name or an alias; an unknown one lists both."""
    if name in _REGISTRY:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    raise UnknownEnvironmentError(name, sorted(_REGISTRY) + sorted(_ALIASES))


def aliases() -> dict[str, str]:
    return dict(_ALIASES)


def tags_of(name: str) -> tuple[str, ...]:
    info = _REGISTRY.get(name)
    return info.tags if info else ()


def all_tags() -> list[str]:
    return sorted({t for info in _REGISTRY.values() for t in info.tags})


def env_info(name: str) -> EnvInfo:
    return _REGISTRY[resolve_name(name)]


def registered(tag: str | None = None) -> list[EnvInfo]:
    """The registered environments by name, only those with `tag` when given."""
    if tag is not None and tag not in all_tags():
        raise UnknownTagError(tag, all_tags())
    return [info for _, info in sorted(_REGISTRY.items()) if tag is None or tag in info.tags]


def make(name: str, **kwargs: Any) -> gymnasium.Env:
    """gymnasium.make with our names and aliases; an unknown name lists the environments that exist."""
    return gymnasium.make(resolve_name(name), disable_env_checker=True, **kwargs)
