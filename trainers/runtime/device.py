"""The runtime every trainer shares: environment defaults, torch threads, the device, the dtype to load in,
the model cache folder, and CPU-safe trl arguments (the CPU pitfalls of docs/training-notes.md, fixed in one place).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from trainers.runtime.errors import TrainerInputError


def setup_env() -> None:
    """Offline, quiet defaults; a user's explicit environment variables win."""
    # raised inside peft/trl/transformers, which still call the pre-5.23 names (training-notes.md pitfall 2)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*deprecated", category=FutureWarning)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def quiet_transformers() -> None:
    """No "Loading weights" / "Writing model shards" bars: they would drown the rich progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def cache_dir() -> Path:
    """Where the tiny model and other built artefacts live: $LACHESIS_CACHE or ~/.cache/lachesis."""
    root = os.environ.get("LACHESIS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "lachesis"


def set_threads(n: int | None = None, default: int = 1) -> int:
    """Torch intra-op threads: `n`, else $LACHESIS_THREADS, else `default` (the trainers' 1: 2 threads on a shared
    2-core box can be 10x slower; the model server's usable_cpus(): it serves one machine's requests)."""
    import torch

    n = int(n or os.environ.get("LACHESIS_THREADS") or default)
    torch.set_num_threads(n)
    return n


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity masks on this platform (macOS)
        return os.cpu_count() or 1


DEVICES = ("auto", "cpu", "cuda")  # `cuda:N` picks one GPU


def check_device(spec: str) -> str:
    """A `--device` value, normalised, or the one-line error (no torch import: configs validate cheaply)."""
    d = str(spec or "").strip().lower()
    if d in DEVICES or (d.startswith("cuda:") and d[5:].isdigit()):
        return d
    raise TrainerInputError(f"unknown --device {spec!r}: use auto (cuda when available), cpu, cuda or cuda:N")


def device(spec: str = "auto"):
    """The torch device of a `--device` value: auto = cuda when available, else cpu. Asking for cuda where there is
    none is the one-line input error, not a traceback from deep inside torch."""
    import torch

    d = check_device(spec)
    if d == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if d.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise TrainerInputError(f"--device {d}: {why}; use --device cpu or --device auto")
        index = int(d[5:] or 0)
        if index >= torch.cuda.device_count():
            raise TrainerInputError(f"--device {d}: only {torch.cuda.device_count()} CUDA device(s) here")
    return torch.device(d)


def load_dtype(dev=None):
    """float32 on CPU, always (transformers 5 loads a checkpoint's own dtype, e.g. bf16, unless told; bf16 on a
    CPU is slow and lossy); bf16 on a GPU that has it. `dev`: the torch device the model goes to (default auto)."""
    import torch

    dev = dev if dev is not None else device()
    if dev.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def cpu_defaults(dev=None, activation_checkpointing: bool = False) -> dict:
    """Arguments for every trl / transformers TrainingArguments-style config on `dev` (default auto).

    bf16 only on a GPU that supports it (trl defaults bf16=True, which fails on CPU); activation checkpointing off
    unless asked for (trl defaults it on: slower, useless for small models); no pin_memory on CPU; no reporting integrations;
    use_cpu when the run is on the CPU, even on a machine that has a GPU.
    """
    import torch

    dev = dev if dev is not None else device()
    gpu = dev.type == "cuda"
    return dict(
        bf16=bool(gpu and torch.cuda.is_bf16_supported()),
        fp16=False,
        activation_checkpointing=activation_checkpointing,
        dataloader_pin_memory=gpu,
        dataloader_num_workers=0,
        report_to="none",
        use_cpu=not gpu,
    )
