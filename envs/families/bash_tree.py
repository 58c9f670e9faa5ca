"""Workspace trees for bash_exec_env's task templates: file names, file text, distractor files, nested
directories of varying depth and naming, and the checks that the files a task does not touch stay as they were.

Trees differ in shape (flat, nested one to three levels, files beside directories) so that a model has to read
the instruction's names instead of a memorised layout (issue 24).
"""
from __future__ import annotations

import random

from envs.core.pools import Pools

EXTENSIONS = ("txt", "md", "csv", "log", "py", "json", "yaml", "ini", "cfg", "dat", "sh", "xml")


def file_name(p: Pools, rng: random.Random, avoid: set[str] = frozenset(), ext: str | None = None) -> str:
    while True:
        name = f"{p.stem(rng)}.{ext or rng.choice(EXTENSIONS)}"
        if name not in avoid:
            return name


def text_of(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def distractors(p: Pools, rng: random.Random, files: dict[str, str], n: int = 2) -> dict[str, str]:
    out = dict(files)
    for _ in range(n):
        out[file_name(p, rng, set(out))] = text_of(p.lines(rng, rng.randint(1, 4)))
    return out


def unchanged(files: dict[str, str], *skip: str) -> list[dict]:
    """Checks that the files the task does not touch are still there, unchanged."""
    return [{"type": "file", "path": k, "content": v} for k, v in files.items() if k not in skip]


def dir_path(p: Pools, rng: random.Random, depth: int | None = None) -> str:
    """A relative directory path of 1-3 stems (`notes`, `kemure/data_7`)."""
    return "/".join(p.stem(rng) for _ in range(depth or rng.choice((1, 1, 2, 3))))


def tree(p: Pools, rng: random.Random, root: str, n: int, ext: str | None = None,
          taken: set[str] | None = None) -> list[str]:
    """n new file paths under `root` at depths 0-2 below it (subdirectories drawn here), all distinct."""
    taken = taken if taken is not None else set()
    subs = [""] + [p.stem(rng) + "/" for _ in range(2)] + [f"{p.stem(rng)}/{p.stem(rng)}/"]
    out: list[str] = []
    while len(out) < n:
        path = f"{root}/{rng.choice(subs)}{file_name(p, rng, ext=ext)}"
        if path not in taken and not any(t.startswith(path + "/") or path.startswith(t + "/") for t in taken):
            taken.add(path)
            out.append(path)
    return out
