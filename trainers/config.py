"""Central defaults for the trainers: CPU-safe settings, offline mode, threads and the device.

Every trainer (our own loops and any trl/transformers config) takes its defaults from here, so the CPU
pitfalls of ../docs/training-notes.md (bf16 default, activation checkpointing, pin_memory, report_to) are fixed
in one place.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SEED = 0


@dataclass
class RunSettings:
    """What every training run takes: the model, the data, adapters, where it records itself."""

    model: str = "tiny"
    data: str = ""
    output: str | None = None  # run folder; default runs/<run_id>
    epochs: float = 1.0
    max_steps: int | None = None
    lr: float | None = None
    batch_size: int = 8
    max_length: int = 1024
    full: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    target_modules: str = "all-linear"
    seed: int = DEFAULT_SEED
    split: str | None = "all"
    lake_root: str | None = None
    record_in_lake: bool = True
    threads: int | None = None
    chat_template: str | None = None

    def lora_targets(self) -> str | list[str]:
        """peft's target_modules: "all-linear" as is, else the comma-separated module names."""
        t = self.target_modules
        return t if t == "all-linear" else [m.strip() for m in t.split(",") if m.strip()]


def setup_env() -> None:
    """Offline, quiet defaults; a user's explicit environment variables win."""
    import warnings

    # raised inside peft/transformers for a setting we never use (training-notes.md pitfall 2)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def quiet_transformers() -> None:
    """No "Loading weights" / "Writing model shards" bars: they would drown the rich progress."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


def cache_dir() -> Path:
    """Where the tiny model and other built artefacts live: $LACHESIS_CACHE or ~/.cache/lachesis."""
    root = os.environ.get("LACHESIS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "lachesis"


def set_threads(n: int | None = None) -> int:
    """Torch intra-op threads: $LACHESIS_THREADS or 1 (2 threads on a shared 2-core box can be 10x slower)."""
    import torch

    n = int(n or os.environ.get("LACHESIS_THREADS", "1"))
    torch.set_num_threads(n)
    return n


def device():
    """cuda when present, else cpu."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def load_dtype():
    """float32 on CPU (transformers 5 loads a checkpoint's own dtype, e.g. bf16, unless told); bf16 on a GPU that has it."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def cpu_defaults() -> dict:
    """Arguments for every trl / transformers TrainingArguments-style config on this machine.

    bf16 only on a GPU that supports it (trl defaults bf16=True, which fails on CPU); activation checkpointing off
    (trl defaults it on: slower, useless for small models); no pin_memory on CPU; no reporting integrations.
    """
    gpu = False
    try:
        import torch

        gpu = torch.cuda.is_available()
        bf16 = gpu and torch.cuda.is_bf16_supported()
    except ImportError:  # pragma: no cover - torch is a train extra
        bf16 = False
    return dict(
        bf16=bool(bf16),
        fp16=False,
        activation_checkpointing=False,
        dataloader_pin_memory=bool(gpu),
        dataloader_num_workers=0,
        report_to="none",
        use_cpu=not gpu,
    )
