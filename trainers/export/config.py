"""lake export-model's settings, apart from the export itself (trainers/export/merged.py) so that building the command
line imports neither the lake nor the model code."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from trainers.runtime.errors import TrainerInputError
from trainers.runtime.options import helped

FORMATS = ("merged", "gguf")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(kw_only=True)
class ExportModelConfig:
    """lake export-model: which run (and increment), which base, where and in what form the model goes."""

    run: str = field(**helped("a run folder (runs/<run>: its adapter/ or model/; a streaming trainer's folder: its "
                              "newest increment, or --step), a checkpoint folder, or an adapter folder"))
    output: str = field(**helped("the folder to write the model into (new or empty)"))
    format: str = field(default="merged", **helped("merged: the adapter merged into a full Hugging Face folder "
                                                   "(safetensors, config, tokenizer, chat template); gguf: the same "
                                                   "folder plus model.gguf for llama.cpp / ollama (Llama models)"))
    model: str | None = field(default=None, **helped(
        "the base model of a LoRA run: tiny | smollm2 | a folder (default: the one the run trained, from its "
        "adapter_config.json)"))
    step: int | None = field(default=None, **helped("a streaming or online trainer's checkpoint step (default the newest)"))
    dtype: str = field(default="float32", **helped(
        "weights dtype of the export: float32 | bfloat16 | float16 (bfloat16 changes greedy outputs: "
        "22 of 32 SmolLM2 answers under vLLM, docs/serving.md)"))

    def __post_init__(self):
        if self.format not in FORMATS:
            raise TrainerInputError(f"unknown --format {self.format!r}: use merged or gguf")
        if self.dtype not in DTYPES:
            raise TrainerInputError(f"unknown --dtype {self.dtype!r}: use {' | '.join(DTYPES)}")
        if self.format == "gguf" and self.dtype == "bfloat16":
            raise TrainerInputError("--format gguf writes float32 or float16: pass --dtype float32 or float16")
        if self.format == "gguf" and importlib.util.find_spec("gguf") is None:
            raise TrainerInputError("--format gguf needs the package gguf, which is not installed: pip install gguf "
                                    "(scripts/bootstrap.sh installs it)")
        if self.step is not None and self.step < 0:
            raise TrainerInputError(f"--step must be at least 0, got {self.step}")
        out = Path(self.output).expanduser()
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise TrainerInputError(f"output folder {out} is not empty: pass a new --output folder")
