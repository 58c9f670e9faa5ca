"""Configuration of the transfer commands (rl_transfer_init, rl_train_transfer) and of the runs rl_train_transfer
starts (an online RL run or an SFT run, each recorded under rl_train_transfer with its transfer spec).

One typed dataclass per command, as trainers/rl/config.py; a light module (no torch) for building the command line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from trainers.eval.config import resolve_env_name
from trainers.rl.config import SEED_FROM_PROJECT, OnlineConfig
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.options import GRADIENT_CHECKPOINTING_HELP, LAKE_HELP, CommonConfig, at_least, helped
from trainers.sft.config import SFTConfig

METHODS = ("online", "sft")
ADAPTERS = ("continue", "fresh")


@dataclass(kw_only=True)
class TransferInitConfig:
    """rl_transfer_init: from which run and environment to which, with which layers frozen."""

    source_env: str = field(default="bash_exec_env", **helped("the environment the source policy was trained on"))
    target_env: str = field(default="git_repo_env", **helped("the environment to transfer to"))
    freeze_layers: str | None = field(default=None, **helped(
        "decoder layers frozen with the embeddings, e.g. 0-8 or 0,2,5-7 (default: freeze_layers of the project "
        "config; empty: the embeddings only)"))
    from_run: str | None = field(default=None, **helped(
        "the source run folder or run id (default: the latest run in the lake's runs trained on --source_env)"))
    adapter: str = field(default="continue", **helped(
        "for a LoRA source: continue (its adapter trains on, its tensors in the frozen layers kept) or fresh (the "
        "source's adapter merged into its base, written beside the spec as <spec>.merged/, and a new adapter on "
        "the layers not frozen)"))
    config: str | None = field(default=None, **helped(
        "the project config file (default: lachesis.toml found upward from the working directory)"))
    lake_root: str | None = field(default=None, **helped(LAKE_HELP))
    output: str | None = field(default=None, **helped("where to write the spec (default runs/<spec_id>.json)"))

    COMMAND: ClassVar[str] = "rl_transfer_init"

    def __post_init__(self):
        self.adapter = str(self.adapter).lower()
        if self.adapter not in ADAPTERS:
            raise TrainerInputError(f"unknown --adapter {self.adapter!r}: use continue or fresh")
        self.source_env = resolve_env_name(self.source_env)
        self.target_env = resolve_env_name(self.target_env)
        if self.source_env == self.target_env:
            raise TrainerInputError(f"--source_env and --target_env are both {self.source_env}: transfer goes from one "
                                    "environment to another")


@dataclass(kw_only=True)
class TransferTrainConfig(CommonConfig):
    """rl_train_transfer: CommonConfig's options; train the target environment from a transfer spec (whose model it
    is), lower layers frozen."""

    spec: str | None = field(default=None, **helped(
        "the transfer spec file of rl_transfer_init (default: the latest one in the lake's runs)"))
    max_steps: int = field(default=2000, **helped("training steps (online: rollout groups + one update each; "
                                                  "sft: optimizer steps)"))
    method: str = field(default="online", **helped("online (RL through the target environment) | sft (the target "
                                                   "environment's rows of --data)"))
    eval_interval: int = field(default=500, **helped("online: evaluate on the target's test split every this many steps"))
    data: str = field(default="sft", **helped(
        "sft: a lake view (its rows of the target environment are used), an export folder or a .jsonl file"))
    batch_size: int = field(default=16, **helped("sft: conversations per optimizer step"))
    micro_batch: int = field(default=8, **helped(
        "episodes (online) or conversations (sft) per forward/backward pass; sft accumulates batch_size / "
        "micro_batch of them per step (smollm2 at 8 held ~9.5 GB on CPU; 2 fits a laptop)"))
    gradient_checkpointing: bool = field(default=False, **helped(GRADIENT_CHECKPOINTING_HELP))
    config: str | None = field(default=None, **helped(
        "the project config file (default: lachesis.toml found upward from the working directory)"))
    output: str | None = field(default=None, **helped("run folder, new or empty (default runs/<run_id>)"))
    resume: str | None = field(default=None, **helped(
        "online: continue a stopped transfer run (its folder or run id) from its latest checkpoint"))
    seed: int | None = field(default=None, **helped(SEED_FROM_PROJECT))
    actors: int = field(default=1, **helped("online: actor processes playing the rollouts (as rl_train_online "
                                            "--actors)"))
    progress: bool = field(default=True, **helped("show a progress bar"))
    plot: bool = field(default=True, **helped("draw the run's plots"))

    COMMAND: ClassVar[str] = "rl_train_transfer"

    def __post_init__(self):
        self.method = str(self.method).lower()
        if self.method not in METHODS:
            raise TrainerInputError(f"unknown --method {self.method!r}: use online or sft")
        at_least(self, 1, "max_steps", "eval_interval", "batch_size", "micro_batch", "actors")
        if self.method == "sft" and self.batch_size > self.micro_batch and self.batch_size % self.micro_batch:
            raise TrainerInputError(f"--batch_size {self.batch_size} is not a multiple of --micro_batch "
                                    f"{self.micro_batch}: sft accumulates whole micro-batches into a step")
        super().__post_init__()

    @property
    def sft_passes(self) -> tuple[int, int]:
        """sft: (conversations per forward pass, passes per optimizer step)."""
        micro = min(self.micro_batch, self.batch_size)
        return micro, self.batch_size // micro


@dataclass(kw_only=True)
class TransferOnlineConfig(OnlineConfig):
    """The online RL run of rl_train_transfer (recorded under that command, with the transfer spec it ran)."""

    transfer: dict | None = field(default=None, **helped("the transfer spec of rl_transfer_init (settled)"))

    COMMAND: ClassVar[str] = "rl_train_transfer"


@dataclass(kw_only=True)
class TransferSFTConfig(SFTConfig):
    """The SFT run of rl_train_transfer --method sft (recorded under that command, with the transfer spec and the
    project config it ran with: the frozen layers and the learning rate come from them)."""

    transfer: dict | None = field(default=None, **helped("the transfer spec of rl_transfer_init (settled)"))
    project: dict | None = field(default=None, **helped("the project config the run trains with (settled)"))

    COMMAND: ClassVar[str] = "rl_train_transfer"
