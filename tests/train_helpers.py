"""Helpers for the trainers' tests (tests/test_train*.py, test_models*.py, test_eval*.py).

Offline, one torch thread, a session-wide tiny model built once into a temporary cache.
"""
from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LACHESIS_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent

TOOLS = [
    {"type": "function", "function": {"name": "run", "description": "Run a shell command in the workspace",
                                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                     "required": ["command"]}}},
    {"type": "function", "function": {"name": "submit", "description": "Finish the task",
                                      "parameters": {"type": "object", "properties": {}}}},
]


def set_threads():
    import torch

    torch.set_num_threads(1)


def _word(rng):
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))


def tool_chats(n: int = 64, seed: int = 0) -> list[dict]:
    """Multi-turn tool-call conversations in the lake's message shape (arguments as JSON text)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        f, w = _word(rng) + ".txt", _word(rng)
        cmd = rng.choice([f"wc -l < {f}", f"echo {w} > {f}", f"cat {f}"])
        rows.append({"split": "train", "tools": TOOLS, "messages": [
            {"role": "system", "content": "You operate a shell workspace."},
            {"role": "user", "content": f"Task {i}: run `{cmd}`."},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "run", "arguments": json.dumps({"command": cmd})}]},
            {"role": "tool", "content": f"{rng.randint(0, 99)}", "tool_call_id": "c1"},
            {"role": "assistant", "content": "Done.", "tool_calls": [{"id": "c2", "name": "submit", "arguments": "{}"}]},
        ]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(script: str, *args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a console script of lachesis.train_cli in a fresh interpreter (what a user runs)."""
    code = f"from lachesis.train_cli import {script}_main as m; m()"
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=str(REPO))


import pytest  # noqa: E402


_TINY: list[Path] = []  # built once per session: every module that imports the fixture gets its own copy of it


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The tiny model built once per session into a temporary LACHESIS_CACHE (subprocesses inherit it)."""
    if not _TINY:
        cache = tmp_path_factory.mktemp("lachesis-cache")
        os.environ["LACHESIS_CACHE"] = str(cache)
        set_threads()
        from trainers.modeling.tiny import tiny_model_path

        _TINY.append(tiny_model_path())
    return _TINY[0]
