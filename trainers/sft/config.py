"""Configuration of the supervised training commands, and the step plan a run settles on.

One typed dataclass per command, in TRL's `*_config.py` style: a help text per field (`**helped(...)`)
and validation in `__post_init__` that raises the one-line `TrainerInputError` the CLI prints. The CLI takes
every default and help text from these fields (`lachesis.console.option`), so the command line, the Python API
and the `config.json` a run folder records cannot disagree.

    rl_finetune_supervised  -> SFTConfig
    llm_finetune            -> InstructConfig (--method sft | dpo)

It imports no lake, so the training loop (trainers/sft/loop.py) runs where there is none (bench/gpu_check.py):
`start_run`, which settles the model-dependent defaults once data and model are known and writes them into the
run folder, is in trainers/sft/run.py. The runtime defaults every trainer shares (device, threads, dtype) are in
trainers/runtime/device.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import context_length
from trainers.runtime.options import GRADIENT_CHECKPOINTING_HELP, ModelConfig, at_least, helped, positive


# The default --max-length is the model's context, capped for memory: activations grow with the tokens of a batch,
# and an agent's conversation is long (Hermes' system prompt with its tool schemas alone is 2,381 SmolLM2 tokens,
# so the former fixed 1024 left no assistant token of any Hermes conversation). The cap's measured memory is in
# docs/streaming-trainer.md; --max-length raises or lowers it, --gradient-checkpointing saves about 40% of it.
MAX_LENGTH_CAP = 4096
MAX_LENGTH_FALLBACK = 1024  # a model folder that names no context


@dataclass(kw_only=True)
class TrainConfig(ModelConfig):
    """What every supervised training command takes: ModelConfig's options, the data, the optimisation, adapters,
    where it records itself."""

    data: str = field(**helped("an export folder (parquet/jsonl + manifest.json), a .jsonl/.parquet file, "
                              "or a lake view name such as sft"))
    output: str | None = field(default=None, **helped("run folder, new or empty (default runs/<run_id>)"))
    epochs: float = field(default=3.0, **helped("passes over the data (--max-steps overrides)"))
    max_steps: int | None = field(default=None, **helped("train exactly this many optimizer steps"))
    learning_rate: float | None = field(default=None, **helped(
        "peak learning rate (default 1e-3 full fine-tuning, 2e-4 LoRA)"))
    batch_size: int = field(default=16, **helped("conversations per micro-batch"))
    grad_accum: int = field(default=1, **helped("micro-batches per optimizer step"))
    max_length: int | None = field(default=None, **helped(
        f"tokens per conversation (default: the model's context, at most {MAX_LENGTH_CAP}); a longer one keeps its "
        "system prompt, tools, task and last turn and drops older turns first (trainers/modeling/fit.py)"))
    full: bool | None = field(default=None, **helped(
        "full fine-tuning (--full) or LoRA (--lora); default: full for a model trained from scratch (tiny), "
        "LoRA for a pretrained one"))
    gradient_checkpointing: bool = field(default=False, **helped(GRADIENT_CHECKPOINTING_HELP))
    lora_rank: int = field(default=16, **helped("LoRA rank"))
    lora_alpha: int = field(default=32, **helped("LoRA alpha (scale = alpha / rank)"))
    lora_dropout: float = field(default=0.0, **helped("dropout on the LoRA path"))
    target_modules: str = field(default="all-linear", **helped("LoRA targets: all-linear or a comma list, e.g. q_proj,v_proj"))
    warmup_steps: int = field(default=30, **helped("linear warm-up steps, at most 10% of the run"))
    split: str = field(default="train", **helped("train only on rows of this split (rows without one are kept; all = every row)"))
    record_in_lake: bool = field(default=True, **helped("record the run as a `runs` event in the lake"))
    chat_template: str | None = field(default=None, **helped("chatml (ours, Hermes-style) or a .jinja file"))
    progress: bool = field(default=True, **helped("show a progress bar"))
    plot: bool = field(default=True, **helped("draw loss.png in the run folder"))

    COMMAND: ClassVar[str] = "train"  # the console script, recorded with the run

    def __post_init__(self):
        if not str(self.data or "").strip():
            raise TrainerInputError("no dataset given: pass --data FOLDER (an export), FILE.jsonl or a lake view name such as sft")
        if not str(self.model or "").strip():
            raise TrainerInputError("no model given: pass --model tiny, --model hermes-3, a local folder or a hub id")
        positive(self, "epochs", "learning_rate")
        at_least(self, 1, "max_steps", "batch_size", "grad_accum", "max_length", "lora_rank", "lora_alpha")
        at_least(self, 0, "warmup_steps")
        if not 0 <= self.lora_dropout < 1:
            raise TrainerInputError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.lora_targets():
            raise TrainerInputError("--target-modules is empty: use all-linear or names such as q_proj,v_proj")
        if not self.split.strip():
            raise TrainerInputError("--split is empty: use train, test or all")
        super().__post_init__()

    def lora_targets(self) -> str | list[str]:
        """peft's target_modules: "all-linear" as is, else the comma-separated module names."""
        t = self.target_modules
        return t if t == "all-linear" else [m.strip() for m in t.split(",") if m.strip()]

    def default_lr(self) -> float:
        return 1e-3 if self.full else 2e-4

    def settle_length(self, model_path: str):
        """This config with --max-length decided: as given, else the model's context (config.json's
        max_position_embeddings, or the tokenizer's model_max_length when smaller) capped at MAX_LENGTH_CAP, else
        MAX_LENGTH_FALLBACK for a folder that names no context."""
        if self.max_length:
            return self
        return replace(self, max_length=min(context_length(model_path) or MAX_LENGTH_FALLBACK, MAX_LENGTH_CAP))

    def settle(self, from_scratch: bool):
        """This config with the model-dependent defaults decided: full fine-tuning for a model trained from scratch
        (LoRA freezes a random base, so it cannot learn: the guide's command went 7.00 -> 6.95), LoRA for a
        pretrained one, then the learning rate for that mode. The run folder records the settled config."""
        settled = replace(self, full=from_scratch if self.full is None else self.full)
        return replace(settled, learning_rate=settled.default_lr() if settled.learning_rate is None
                       else settled.learning_rate)

    def plan(self, examples: int, processes: int = 1) -> "StepPlan":
        """Optimizer steps of this run over `examples` rows, and the warm-up bounded by the run's length. Several
        processes each take --batch-size rows per micro-batch (trainers/sft/distributed.py)."""
        per_epoch = max(1, math.ceil(examples / (self.batch_size * processes)) // self.grad_accum)
        total = self.max_steps or max(1, math.ceil(self.epochs * per_epoch))
        return StepPlan(total=total, per_epoch=per_epoch, warmup=min(self.warmup_steps, total // 10))


@dataclass(kw_only=True)
class SFTConfig(TrainConfig):
    """rl_finetune_supervised: supervised fine-tuning on chats, assistant-only loss, our own loop (trainers/sft/sft.py)."""

    min_lr_ratio: float = field(default=0.1, **helped("the cosine schedule ends at this fraction of the peak lr"))
    weight_decay: float = field(default=0.01, **helped("AdamW weight decay (matrices only)"))
    grad_clip: float = field(default=1.0, **helped("clip the gradient norm to this (0 = off)"))
    share_prefix: bool = field(default=True, **helped("compute a batch's common prompt prefix (system prompt + tools) "
                                                      "once (not with gradient_checkpointing: it needs the KV cache)"))
    bucket_by_length: bool = field(default=False, **helped("sort batches by length (less padding, measured worse learning)"))
    log_every: int | None = field(default=None, **helped(
        "log the loss every this many optimizer steps (default: about 50 points a run, at most every 10th step: "
        "every step of a 12-step run)"))

    COMMAND: ClassVar[str] = "rl_finetune_supervised"

    def log_interval(self, total_steps: int) -> int:
        """--log-every, else ~50 points over the run, no sparser than every 10th step (a fixed 10 showed only
        step 1 and the last of a 12-step run, in the log, the loss plot and the progress line)."""
        return self.log_every or min(10, max(1, total_steps // 50))

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 1, "log_every")
        at_least(self, 0, "weight_decay", "grad_clip")
        if not 0 <= self.min_lr_ratio <= 1:
            raise TrainerInputError(f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")


METHODS = ("sft", "dpo")
MIN_SCRATCH_STEPS = 200  # a from-scratch tiny model's loss only starts to fall in earnest after a few hundred steps


@dataclass(frozen=True)
class StepPlan:
    total: int  # optimizer steps
    per_epoch: int
    warmup: int

    def warning(self, from_scratch: bool) -> str | None:
        """Why this run will probably learn nothing, or None."""
        if from_scratch and self.total < MIN_SCRATCH_STEPS:
            return (f"only {self.total} optimizer steps: a model trained from scratch needs at least {MIN_SCRATCH_STEPS} "
                    "to learn; raise --epochs or --max-steps, or give more data")
        return None


@dataclass(kw_only=True)
class InstructConfig(SFTConfig):
    """llm_finetune: instruction tuning, by SFT on chats / instruction pairs or by DPO on preference rows."""

    method: str = field(default="sft", **helped("sft (messages or prompt/completion rows) | dpo (prompt/chosen/rejected)"))
    beta: float = field(default=0.1, **helped("DPO beta: how far the policy may move from the reference model"))

    COMMAND: ClassVar[str] = "llm_finetune"

    def default_lr(self) -> float:
        if self.method == "dpo":  # DPO moves away from a reference: smaller steps than SFT
            return 5e-4 if self.full else 1e-4
        return super().default_lr()

    def __post_init__(self):
        self.method = str(self.method).lower()
        if self.method not in METHODS:
            raise TrainerInputError(f"unknown --method {self.method!r}: use sft or dpo")
        super().__post_init__()
        positive(self, "beta")
