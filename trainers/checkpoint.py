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
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

DIR = "checkpoints"
PREFIX = "step-"


def rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")) + [root]:
        _fsync(p)


def save(run_dir: Path, step: int, save_weights, optimizer, scheduler, state: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` atomically; `save_weights(folder)` writes the adapter or model. Returns its path."""
    import torch

    root = Path(run_dir) / DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    tmp = root / f".tmp-{PREFIX}{step:08d}-{os.getpid()}"
    for stale in root.glob(".tmp-*"):  # left by a run killed while writing one
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir()
    save_weights(str(tmp / "weights"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
               tmp / "state.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=2))
    _fsync_tree(tmp)
    if final.exists():  # the same step written again after a resume: the new copy replaces it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync(root)
    for old in complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete(run_dir: Path) -> list[Path]:
    """The complete checkpoints of a run, oldest first (temporary folders of a killed write are ignored)."""
    root = Path(run_dir) / DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX))


def latest(run_dir: Path) -> Path | None:
    found = complete(run_dir)
    return found[-1] if found else None


def read_state(ckpt: Path) -> dict:
    return json.loads((Path(ckpt) / "state.json").read_text())


def load_into(ckpt: Path, optimizer, scheduler) -> None:
    """Restore optimizer, scheduler and RNG states (the weights are loaded by the caller from ckpt/weights)."""
    import torch

    blob = torch.load(Path(ckpt) / "state.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])


def weights(ckpt: Path) -> Path:
    return Path(ckpt) / "weights"
