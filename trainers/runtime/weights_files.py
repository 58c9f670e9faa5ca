"""What a weights folder must be before any file in it is opened: the model server's --adapter and each --follow
increment, and the run `lake export-model` merges.

A followed run's folder is written by a trainer, but also by hands, copies and failing disks, and the server runs
unattended: a truncated or garbage `adapter_model.safetensors`, a pickle `adapter_model.bin` or `pytorch_model.bin`,
or a FIFO under a weights file name must not stop it. Reading a FIFO blocks in safetensors' Rust code with the GIL
held (the whole server froze: health timed out, SIGTERM was ignored), and a pickle runs code when loaded. So
`check_weights(folder)`, before anything else opens a file there:
* every entry is a folder or a regular file, looked at with lstat (never opened): a FIFO, device, socket or symlink
  is refused;
* no pickle weights (.bin, .pt, .pth, .pkl, .ckpt): safetensors only (what save_pretrained writes);
* at least one .safetensors file, each whose header parses and whose data is all there (safe_open reads the header
  and checks the data's extent against the file's size).
A refusal is a CheckpointError (one line naming the file): the follower skips the folder and goes on, a command
stops with it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from trainers.runtime.checkpoint import CheckpointError, check_safetensors

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
MAX_ENTRIES = 10_000  # files and folders looked at in one weights folder at most (a folder is a few dozen)


def check_weights(folder: str | Path) -> None:
    """`folder` may be loaded (see the module docstring); a CheckpointError naming the first thing wrong."""
    root = Path(folder)
    try:
        mode = os.lstat(root).st_mode
    except OSError as exc:
        raise CheckpointError(f"{root}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(mode):
        raise CheckpointError(f"{root}: not a folder of weights")
    for path in _entries(root):
        kind = os.lstat(path).st_mode
        if stat.S_ISDIR(kind):
            continue
        if not stat.S_ISREG(kind):
            raise CheckpointError(f"{path}: not a regular file (a FIFO, device, socket or link): not opened")
        if path.suffix in PICKLE_SUFFIXES:
            raise CheckpointError(f"{path}: pickle weights are never loaded here (they can run code): save them as "
                                  "safetensors (save_pretrained's default)")
    check_safetensors(root)  # only regular files by now: opening them cannot block


def _entries(root: Path) -> list[Path]:
    """Every path under `root`, without following links (os.walk's default), at most MAX_ENTRIES."""
    out: list[Path] = []
    for top, dirs, files in os.walk(root):
        out += [Path(top) / n for n in dirs + files]
        if len(out) > MAX_ENTRIES:
            raise CheckpointError(f"{root}: more than {MAX_ENTRIES} files: not a weights folder")
    return out
