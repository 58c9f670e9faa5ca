"""Atomic training checkpoints: weights, optimizer, scheduler, RNG states, step and data position in one folder.

A checkpoint is written into a temporary folder beside its final place and renamed into place with one
`os.replace`, after every file in it is fsynced: a run killed at any instant leaves either the previous
checkpoints or the new one complete, never a half-written one (a folder that exists under its final name is
complete by construction). `latest(run_dir)` is the newest complete one; older ones beyond `keep` are removed
after the new one is in place.

    runs/<run_id>/checkpoints/step-00000050/
        weights/      the LoRA adapter or the whole model (save_pretrained)
        state.pt      optimizer + scheduler state dicts, RNG states (python, numpy, torch, cuda)
        state.json    step, data position, the train_log lines written so far, anything the trainer adds

Reading never runs code: state.pt holds only tensors and plain values (the numpy RNG state as lists, not an
ndarray) and is read with `torch.load(weights_only=True)`; the weights are safetensors (save_pretrained's default,
which transformers and peft load without unpickling). A planted pickle is refused, not run.

A folder in place is complete when it was written, yet a disk, a copy or a hand can still truncate or replace a file
in it. `usable(run_dir)` is the newest checkpoint whose state.json, state.pt and weights headers all read; each newer
broken one is reported in one line and moved aside (`broken-step-N`, kept for a look) so that nothing (an actor, a
resume) picks it up, and where none is left the run refuses to start rather than starting over from nothing.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Iterable

from ground.atomic import folder_atomically
from trainers.runtime.errors import TrainerInputError

DIR = "checkpoints"
PREFIX = "step-"
BROKEN = "broken-"  # the prefix a broken checkpoint folder is renamed with (complete() no longer lists it)
STEP_NAME = re.compile(re.escape(PREFIX) + r"[0-9]+")  # a checkpoint folder's whole name


class CheckpointError(TrainerInputError):
    """A checkpoint whose files do not read (truncated, garbage, or a pickle that a weights-only load refuses)."""


def rng_state() -> dict:
    import numpy as np
    import torch

    # numpy's state as plain values: an ndarray would need numpy's pickled reconstructors, which a weights-only
    # load refuses
    npy = np.random.get_state(legacy=False)
    npy = {**npy, "state": {**npy["state"], "key": npy["state"]["key"].tolist()}}
    state = {"python": random.getstate(), "numpy": npy, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    npy = state["numpy"]
    np.random.set_state({**npy, "state": {**npy["state"], "key": np.asarray(npy["state"]["key"], dtype=np.uint32)}})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, step: int, save_weights, optimizer, scheduler, state: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` atomically; `save_weights(folder)` writes the adapter or model. Returns its path."""
    import torch

    root = Path(run_dir) / DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    for stale in root.glob(".*"):  # a write killed midway leaves a temp or set-aside folder (a dot name: ground/atomic.py)
        shutil.rmtree(stale, ignore_errors=True)
    # the same step written again after a resume: the new copy replaces it
    with folder_atomically(final, replace=True, durable=True) as tmp:
        save_weights(str(tmp / "weights"))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
                   tmp / "state.pt")
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=2))
    for old in complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete(run_dir: Path) -> list[Path]:
    """The complete checkpoints of a run, oldest first (temporary folders of a killed write, and folders named
    otherwise than step-<digits>, such as a hand's step-00000002.bak copy, are ignored)."""
    root = Path(run_dir) / DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if STEP_NAME.fullmatch(p.name) and p.is_dir())


def step_of(ckpt: Path) -> int:
    """The step a checkpoint folder holds, from its name (step-00000050: 50)."""
    return int(Path(ckpt).name.removeprefix(PREFIX))


def latest(run_dir: Path) -> Path | None:
    found = complete(run_dir)
    return found[-1] if found else None


def read_state(ckpt: Path, require: Iterable[str] = ()) -> dict:
    """state.json of `ckpt`; a CheckpointError (one line) when it does not parse or lacks a `require`d key."""
    path = Path(ckpt) / "state.json"
    try:
        state = json.loads(path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    missing = [k for k in ("step", *require) if k not in state]
    if missing:
        raise CheckpointError(f"{path}: no {', '.join(missing)}")
    return state


def _refusal(exc: pickle.UnpicklingError) -> str:
    """Why a weights-only load refused state.pt, in a few words (the global a planted pickle would call)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    what = f" (it would call {found.group(1)})" if found else ""
    return f"is a pickle a weights-only load refuses{what}: not a checkpoint this trainer wrote"


def load_blob(ckpt: Path, mmap: bool = False) -> dict:
    """state.pt of `ckpt` through `torch.load(weights_only=True)`: tensors and plain values only, never code."""
    import torch

    path = Path(ckpt) / "state.pt"
    try:
        with warnings.catch_warnings():  # a foreign pickle's protocol warning: the error below says it all
            warnings.simplefilter("ignore", UserWarning)
            blob = torch.load(path, weights_only=True, map_location="cpu", mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: refused, it {_refusal(exc)}") from None
    except (OSError, EOFError, RuntimeError, zipfile.BadZipFile, ValueError) as exc:
        # torch reads a truncated or garbled zip as a RuntimeError from its stream reader
        raise CheckpointError(f"{path}: unreadable, truncated or corrupt ({type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0][:100]})") from None
    if not isinstance(blob, dict) or not {"optimizer", "scheduler", "rng"} <= set(blob):
        raise CheckpointError(f"{path}: not a training state (optimizer, scheduler, rng)")
    return blob


def check_safetensors(folder: Path) -> None:
    """Every safetensors file of the weights opens (its header parses and its data is all there); a CheckpointError
    naming the first that does not, or where there is none."""
    from safetensors import SafetensorError, safe_open

    files = sorted(folder.rglob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise CheckpointError(f"{folder}: no safetensors weights")
    for f in files:
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{f}: unreadable, truncated or corrupt ({str(exc)[:100]})") from None


def check(ckpt: Path, require: Iterable[str] = (), validate: Callable[[dict], object] | None = None) -> dict:
    """state.json of `ckpt` once its state.pt and weights read too; a CheckpointError naming the broken file.
    `validate(state)` is the caller's own check of its keys' values (a TypeError, ValueError, KeyError or
    AttributeError from it: broken)."""
    state = read_state(ckpt, require)
    if validate is not None:
        try:
            validate(state)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CheckpointError(f"{Path(ckpt) / 'state.json'}: bad values ({type(exc).__name__}: "
                                  f"{str(exc)[:100]})") from None
    load_blob(ckpt, mmap=True)  # mmap: the check reads the archive's index, not every tensor
    check_safetensors(weights(ckpt))
    return state


def usable(run_dir: Path, require: Iterable[str] = (), report: Callable[[str], None] | None = None,
           set_aside: bool = False, validate: Callable[[dict], object] | None = None) -> Path | None:
    """The newest complete checkpoint whose files all read, or None when the run has none. Each newer broken one is
    `report`ed in one line and, with `set_aside`, renamed broken-step-N (the caller holds the run). Where there are
    checkpoints but none reads: a CheckpointError, as starting over would silently retrain everything."""
    found = complete(run_dir)
    broken = []
    for ckpt in reversed(found):
        try:
            check(ckpt, require, validate)
        except CheckpointError as exc:
            broken.append(str(exc))
            if report is not None:
                report(f"checkpoint {ckpt.name} is broken, skipped: {exc}")
            if set_aside:
                _set_aside(ckpt)
            continue
        return ckpt
    if broken:
        raise CheckpointError(f"no usable checkpoint in {Path(run_dir) / DIR}: {broken[0]}; remove the broken "
                              "checkpoint folders to start over from nothing")
    return None


def _set_aside(ckpt: Path) -> None:
    target, n = ckpt.with_name(BROKEN + ckpt.name), 1
    while target.exists():
        target, n = ckpt.with_name(f"{BROKEN}{ckpt.name}.{n}"), n + 1
    os.replace(ckpt, target)


def set_aside_found(run_dir: Path) -> list[str]:
    """Names of the checkpoints set aside as broken."""
    root = Path(run_dir) / DIR
    return sorted(p.name for p in root.glob(BROKEN + "*")) if root.is_dir() else []


def load_into(ckpt: Path, optimizer, scheduler) -> None:
    """Restore optimizer, scheduler and RNG states (the weights are loaded by the caller from ckpt/weights)."""
    blob = load_blob(ckpt)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])


def weights(ckpt: Path) -> Path:
    return Path(ckpt) / "weights"
