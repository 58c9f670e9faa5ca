"""One environment's tasks by split (`Suite`): the built-in ones generated on demand from (split, index,
template), or the list of a task file; and the seeded RNG and task id of built-in task i.

envs/core/suites.py finds an environment's Suite by its registered name.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable

from envs.core.tasks import FAMILY_SPLIT, SPLITS, Task, loaded_task


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
            return task if task.env else with_env(task, self.env)
        raise KeyError(f"{self.env}: no task {task_id!r}")

    @classmethod
    def from_tasks(cls, env: str, tasks: list[Task]) -> "Suite":
        counts = {s: sum(1 for t in tasks if t.split == s) for s in SPLITS}
        return cls(env=env, counts=counts, tasks=tuple(tasks))


def with_env(task: Task, env: str) -> Task:
    """The task, marked as `env`'s (a task file may leave `env` out)."""
    return replace(task, env=env)


def rng_for(env: str, split: str, index: int) -> random.Random:
    """Per-task RNG: tasks are reproducible one by one, with no global state."""
    return random.Random(f"{env}:{split}:{index}")


def builtin_id(env: str, split: str, index: int) -> str:
    """The task_id of built-in task `index` of a split (Suite.find parses it back)."""
    return f"{env}:{split}:{index:05d}"
