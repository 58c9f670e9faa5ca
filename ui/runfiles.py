"""A run folder's per-step log (`train_log.jsonl`, trainers/runtime/runfolder.py), read for the run page's curves
only from inside the folder of run folders `lake ui --runs` names: the run's recorded `metadata.run_dir` is data in
the lake (any writer of the runs table put it there), so it is never opened as a path of its own. Inside that
folder, ground.files.read_regular opens it: no symbolic link followed on the way, a regular file only (a FIFO or a
device is refused before a byte is read), at most MAX_LOG_BYTES. Without `--runs` (and on `lake serve`) the page
draws what the lake itself records (evaluations, increments) and says why the per-step loss is absent.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ground.files import Refusal, read_regular

TRAIN_LOG = "train_log.jsonl"
MAX_LOG_BYTES = 64 << 20


def train_log(runs_root: str | os.PathLike | None, run_dir: Any) -> tuple[list[dict], str | None]:
    """(the log's records, or []; why there are none, or None). Lines that are not JSON objects are skipped."""
    if runs_root is None:
        return [], "the server was not given a folder of run folders (lake ui --runs): per-step loss not read"
    if not isinstance(run_dir, str) or not run_dir:
        return [], "the run records no run folder (metadata.run_dir)"
    root = Path(runs_root).resolve()
    path = Path(run_dir)
    if not path.is_absolute() or not path.is_relative_to(root):
        return [], f"the run's folder is not inside {root} (lake ui --runs)"
    rel = path.relative_to(root).as_posix()
    try:
        data = read_regular(root, f"{rel}/{TRAIN_LOG}" if rel != "." else TRAIN_LOG, MAX_LOG_BYTES)
    except Refusal as exc:
        return [], f"{TRAIN_LOG} not read: {exc.reason}"
    except OSError as exc:
        return [], f"{TRAIN_LOG} not read: {exc.strerror or exc}"
    out = []
    for line in data.splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out, None
