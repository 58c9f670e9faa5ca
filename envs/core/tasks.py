"""Tasks: the record every environment runs, and loading user task files (`--tasks FILE.jsonl`).

A task line is a JSON object:
  task_id      str, unique in the file
  instruction  str, what the agent is asked
  files        {relative path: initial text} of the workspace (may be empty)
  solution     [{"name": tool, "arguments": {...}}], the reference tool calls (submit is implied)
  env          optional, the environment it is for
  and the checker spec of its environment:
    python_debug_env: tests (Python test source, run hidden), optional visible_tests {name: source}
    bash_exec_env:    checks [{type: file|exists|absent|tar|command|output, ...}]
    git_repo_env:     checks as above, optional setup [shell commands that build the repository]
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ground.files import Refusal, open_named
from ground.jsonl import JsonlError, iter_records

# train: what training sees; test: held-out names (slot values no train text holds) of the train families;
# test_families: whole task families that no train or test task comes from (issue 24), with test-split names.
FAMILY_SPLIT = "test_families"
SPLITS = ("train", "test", FAMILY_SPLIT)


def pool_split(split: str) -> str:
    """The slot-value pool of a split (envs/core/pools.py): every held-out split draws from the test pool."""
    return "train" if split == "train" else "test"


@dataclass(frozen=True)
class Task:
    task_id: str
    instruction: str
    files: dict[str, str] = field(default_factory=dict)
    solution: list[dict] = field(default_factory=list)
    checker: dict = field(default_factory=dict)  # env-specific: tests / checks
    setup: list[str] = field(default_factory=list)
    env: str = ""
    split: str = "train"
    template: str = ""
    slots: dict[str, str] = field(default_factory=dict)  # the pool values a model has to copy
    source: str = ""  # "builtin" or "file.jsonl:LINE"

    def as_record(self) -> dict:
        """The JSONL form (what load_tasks_file reads back)."""
        rec = {"task_id": self.task_id, "env": self.env, "split": self.split, "instruction": self.instruction,
               "files": self.files, "solution": self.solution, **self.checker}
        if self.setup:
            rec["setup"] = self.setup
        if self.template:
            rec["template"] = self.template
        return rec


class TaskFileError(JsonlError):
    """A malformed task file: names the file, line and field ("" when none: the line, or the file, as a whole)."""

    def __init__(self, path: str, line: int, message: str, field: str = "", **kw):
        super().__init__(path, line, message, field, **kw)


# The environment-specific fields a task record keeps (each environment's validate_task checks its own): the
# checkers of python, bash and git; a web page, its seed and data mode (web_form_env); a page generator's name.
CHECKER_FIELDS = ("tests", "visible_tests", "checks", "miniwob", "seed", "mode", "generator")


def task_from_record(rec: dict, *, where: tuple[str, int] = ("<record>", 0), split: str | None = None) -> Task:
    """Validate the generic fields of one record (env-specific fields are validated by the env)."""
    path, line = where

    def err(fld: str, msg: str) -> TaskFileError:
        return TaskFileError(path, line, msg, fld)

    if not isinstance(rec, dict):
        raise err("", "expected a JSON object")
    for fld in ("task_id", "instruction"):
        if not isinstance(rec.get(fld), str) or not rec[fld].strip():
            raise err(fld, "missing or not a non-empty string")
    files = rec.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise err("files", "expected an object of relative path -> text")
    for rel in files:
        norm = os.path.normpath(rel)
        if os.path.isabs(rel) or norm.startswith("..") or norm in (".", ""):
            raise err("files", f"path {rel!r} must be relative and stay inside the workspace")
    solution = rec.get("solution", [])
    if not isinstance(solution, list):
        raise err("solution", "expected a list of tool calls")
    for i, call in enumerate(solution):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(
                call.get("arguments", {}), dict):
            raise err("solution", f"item {i}: expected {{\"name\": str, \"arguments\": object}}")
    setup = rec.get("setup", [])
    if not isinstance(setup, list) or not all(isinstance(s, str) for s in setup):
        raise err("setup", "expected a list of shell commands")
    env = rec.get("env", "")
    if not isinstance(env, str):
        raise err("env", "expected a string")
    sp = rec.get("split", split or "train")
    if sp not in SPLITS:
        raise err("split", f"expected one of {SPLITS}")
    checker = {k: rec[k] for k in CHECKER_FIELDS if k in rec}
    return Task(task_id=rec["task_id"], instruction=rec["instruction"], files=dict(files),
                solution=[{"name": c["name"], "arguments": dict(c.get("arguments", {}))} for c in solution],
                checker=checker, setup=list(setup), env=env, split=sp, template=str(rec.get("template", "")),
                source=f"{path}:{line}")


# Tasks that are not built in (read from files, or given to an environment as objects), by task_id: an
# environment made without `tasks=` still finds them on reset(options={"task_id": ...}), and so do the
# policies, which get only reset's info (trainers load a file, then reset by id).
_LOADED: dict[str, Task] = {}


def remember_tasks(tasks: list[Task]) -> None:
    _LOADED.update((t.task_id, t) for t in tasks)


def loaded_task(task_id: str, env: str = "") -> Task | None:
    task = _LOADED.get(task_id)
    return task if task is not None and (not env or not task.env or task.env == env) else None


MAX_TASK_FILE_MB = 256  # a task file larger than this is refused before it is read


def load_tasks_file(path: str | os.PathLike) -> list[Task]:
    """Read a JSONL task file once (ground/jsonl.py: plain or gzip); a malformed line raises TaskFileError naming
    the line and field. Only a regular file of at most MAX_TASK_FILE_MB is read (a folder, FIFO or device is
    refused before a byte is read, ground/files.py: nothing hangs), and a line nested deeper than orjson's limit is
    an invalid line, never a RecursionError."""
    p = Path(path)
    try:
        fh = open_named(p)
    except FileNotFoundError:
        raise FileNotFoundError(f"task file not found: {p}") from None
    except Refusal:
        raise TaskFileError(str(p), 0, "not a regular file (a folder, FIFO or device): give a .jsonl file") from None
    except OSError as exc:
        raise TaskFileError(str(p), 0, f"cannot read it ({exc.strerror})") from None
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_TASK_FILE_MB << 20:
            raise TaskFileError(str(p), 0, f"{size >> 20} MB; task files of at most {MAX_TASK_FILE_MB} MB are read")
        for lineno, rec in iter_records(p, fileobj=fh, error=TaskFileError):
            task = task_from_record(rec, where=(str(p), lineno))
            if task.task_id in seen:
                raise TaskFileError(str(p), lineno, f"duplicate {task.task_id!r} (first on line {seen[task.task_id]})",
                                    "task_id")
            seen[task.task_id] = lineno
            tasks.append(task)
    if not tasks:
        raise TaskFileError(str(p), 0, "no tasks in file")
    remember_tasks(tasks)
    return tasks


def line_of(task: Task) -> tuple[str, int]:
    path, _, line = task.source.rpartition(":")
    return (path or task.source, int(line) if line.isdigit() else 0)
