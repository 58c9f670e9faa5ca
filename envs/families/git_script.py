"""Scripted repositories for git_repo_env's task templates: the shell lines that write files and commit them,
a base repository on main, fresh branch and file names, and the checks most tasks share.

Setups are plain shell lines run once per task (git_repo.RepoCache copies the result for later episodes).
"""
from __future__ import annotations

import random

from envs.core.pools import Pools
from envs.families.command_env import cmd, sh

EXTENSIONS = ("txt", "md", "py", "cfg")
ON_MAIN = cmd(["git", "symbolic-ref", "--short", "HEAD"], "main")
NO_MERGE = sh("! git rev-parse -q --verify MERGE_HEAD >/dev/null")
CLEAN = cmd(["git", "status", "--porcelain"], "")


def write_lines(path: str, lines: list[str]) -> str:
    return "printf '%s\\n' " + " ".join(f"'{x}'" for x in lines) + f" > {path}"


def commit_all(msg: str) -> str:
    return f"git add -A && git commit -qm '{msg}'"


def message(p: Pools, rng: random.Random) -> str:
    return f"{p.word(rng)} {p.word(rng)}"


def base_repo(p: Pools, rng: random.Random, names: set[str]) -> tuple[list[str], dict[str, list[str]]]:
    """A repository on main with one or two commits; returns the setup and the committed files."""
    setup = ["git init -q ."]
    files: dict[str, list[str]] = {}
    for _ in range(rng.randint(1, 2)):
        f = new_name(p, rng, names, ext=True)
        files[f] = p.lines(rng, 2)
        setup += [write_lines(f, files[f]), commit_all(message(p, rng))]
    return setup, files


def new_name(p: Pools, rng: random.Random, taken: set[str], ext: bool = False) -> str:
    while True:
        n = p.stem(rng) + (f".{rng.choice(EXTENSIONS)}" if ext else "")
        if n not in taken:
            taken.add(n)
            return n


def conflict_repo(p: Pools, rng: random.Random) -> tuple[list[str], str, str, list[str], list[str]]:
    """A merge of a branch into main stopped on a conflict in one file: (setup, file, branch, main's lines,
    the branch's lines)."""
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f = next(iter(files))
    b = new_name(p, rng, names)
    ours, theirs = p.lines(rng, 2), p.lines(rng, 2)
    while theirs[0] == ours[0]:
        theirs = p.lines(rng, 2)
    setup += [f"git checkout -qb {b}", write_lines(f, theirs), commit_all(message(p, rng)), "git checkout -q main",
              write_lines(f, ours), commit_all(message(p, rng)), f"git merge -q {b} >/dev/null 2>&1 || true"]
    return setup, f, b, ours, theirs


def merge_resolved(f: str, lines: list[str]) -> list[dict]:
    """The checks of a finished merge on main whose file f holds `lines`."""
    return [cmd(["git", "show", f"HEAD:{f}"], "\n".join(lines)), NO_MERGE, ON_MAIN,
            sh("test $(git rev-list --parents -n 1 HEAD | wc -w) = 3")]
