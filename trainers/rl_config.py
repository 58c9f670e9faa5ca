"""Configuration of the online RL and transfer commands (rl_train_online, rl_transfer_init, rl_train_transfer).

One typed dataclass per command, as trainers/config.py (help per field, validation in `__post_init__` raising the
one-line TrainerInputError, the CLI's defaults and help taken from the fields). They hold what a command line
chooses: the environment, the step count, where the run starts and goes. The hyperparameters (learning rate,
group and batch sizes, reward weights, freeze spec...) live in the project config, lachesis.toml
(trainers/project_config.py), which `rl_edit_config` edits and every run folder records. A separate, light
module, so building the command line imports neither torch nor matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .config import GRADIENT_CHECKPOINTING_HELP, SFTConfig, at_least, check_device, helped
from .errors import TrainerInputError
from .evaluate import resolve_env_name
from .reporting import REPORT_TO_HELP, check_report_to

METHODS = ("online", "sft")


@dataclass(kw_only=True)
class OnlineConfig:
    """rl_train_online: which environment, how many steps, where from, where to; the rest is the project config."""

    env: str = field(default="python_debug_env", **helped(
        "the environment to train on: a registered name or alias (debug-python, shell, git)"))
    steps: int = field(default=5000, **helped("training steps; each plays batch_size tasks x group_size episodes "
                                              "and makes one update"))
    eval_interval: int = field(default=500, **helped(
        "evaluate on the test split every this many steps (also before the first step and after the last)"))
    model: str = field(default="tiny", **helped("tiny | smollm2 | hermes-3 | a local model folder | a hub id"))
    init: str | None = field(default=None, **helped("start from this SFT run folder (its adapter/ or model/)"))
    config: str | None = field(default=None, **helped(
        "the project config file (default: lachesis.toml found upward from the working directory)"))
    tasks_file: str | None = field(default=None, **helped("a tasks .jsonl file (train and test rows) instead of "
                                                          "the environment's built-in suite"))
    output: str | None = field(default=None, **helped("run folder, new or empty (default runs/<run_id>)"))
    resume: str | None = field(default=None, **helped(
        "continue a stopped run (its folder, or a run id under runs/) from its latest checkpoint, at the same step "
        "and data position; the run's recorded config is used"))
    lake_root: str | None = field(default=None, **helped(
        "an existing lake for the rollouts, evaluations and runs events (default $LAKE_ROOT or ./data/lake)"))
    seed: int | None = field(default=None, **helped("seed of the task order, sampling and init (default: the config's)"))
    micro_batch: int = field(default=8, **helped("episodes per forward/backward pass in an update"))
    gradient_checkpointing: bool = field(default=False, **helped(GRADIENT_CHECKPOINTING_HELP))
    actors: int = field(default=1, **helped(
        "1: rollouts are played in the training process; N > 1: N actor processes play them with the latest "
        "policy checkpoint and append them to the lake, and the trainer (the learner) consumes them from the "
        "lake's change feed"))
    max_context: int = field(default=2048, **helped("an episode ends once its prompt reaches this many tokens"))
    threads: int | None = field(default=None, **helped("torch threads (default 1 or $LACHESIS_THREADS)"))
    device: str = field(default="auto", **helped("auto (cuda when available) | cpu | cuda | cuda:N; bf16 only on a GPU"))
    report_to: str = field(default="none", **helped(REPORT_TO_HELP))
    progress: bool = field(default=True, **helped("show a progress bar"))
    plot: bool = field(default=True, **helped("draw loss.png and eval_curve.png in the run folder"))
    freeze_layers: list[int] | None = field(default=None, **helped(
        "decoder layers frozen with the embeddings (rl_train_transfer sets them; None: nothing frozen)"))
    # settled when the run starts, recorded in config.json, read back by --resume
    run_id: str | None = field(default=None, **helped("the run's id (set when it starts)"))
    full: bool | None = field(default=None, **helped("full fine-tuning (True) or LoRA, settled from the model"))
    project: dict | None = field(default=None, **helped("the project config the run trains with (settled)"))
    policy: dict | None = field(default=None, **helped("where the policy's weights come from (settled)"))

    COMMAND: ClassVar[str] = "rl_train_online"
    record_in_lake: ClassVar[bool] = True  # the lake is the channel between actor and learner: always on

    def __post_init__(self):
        if not self.resume:
            self.env = resolve_env_name(self.env)
        at_least(self, 1, "steps", "eval_interval", "micro_batch", "threads", "actors")
        self.device = check_device(self.device)
        self.report_to = check_report_to(self.report_to)
        at_least(self, 64, "max_context")


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
    config: str | None = field(default=None, **helped(
        "the project config file (default: lachesis.toml found upward from the working directory)"))
    lake_root: str | None = field(default=None, **helped("an existing lake (default $LAKE_ROOT or ./data/lake)"))
    output: str | None = field(default=None, **helped("where to write the spec (default runs/<spec_id>.json)"))

    COMMAND: ClassVar[str] = "rl_transfer_init"

    def __post_init__(self):
        self.source_env = resolve_env_name(self.source_env)
        self.target_env = resolve_env_name(self.target_env)
        if self.source_env == self.target_env:
            raise TrainerInputError(f"--source_env and --target_env are both {self.source_env}: transfer goes from one "
                                    "environment to another")


@dataclass(kw_only=True)
class TransferTrainConfig:
    """rl_train_transfer: train the target environment from a transfer spec, lower layers frozen."""

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
        "online: episodes per forward/backward pass in an update (smollm2 at 8 held ~9.5 GB on CPU; 2 fits a laptop)"))
    gradient_checkpointing: bool = field(default=False, **helped(GRADIENT_CHECKPOINTING_HELP))
    config: str | None = field(default=None, **helped(
        "the project config file (default: lachesis.toml found upward from the working directory)"))
    lake_root: str | None = field(default=None, **helped("an existing lake (default $LAKE_ROOT or ./data/lake)"))
    output: str | None = field(default=None, **helped("run folder, new or empty (default runs/<run_id>)"))
    resume: str | None = field(default=None, **helped(
        "online: continue a stopped transfer run (its folder or run id) from its latest checkpoint"))
    seed: int | None = field(default=None, **helped("seed (default: the config's)"))
    actors: int = field(default=1, **helped("online: actor processes playing the rollouts (as rl_train_online "
                                            "--actors)"))
    threads: int | None = field(default=None, **helped("torch threads (default 1 or $LACHESIS_THREADS)"))
    device: str = field(default="auto", **helped("auto (cuda when available) | cpu | cuda | cuda:N; bf16 only on a GPU"))
    report_to: str = field(default="none", **helped(REPORT_TO_HELP))
    progress: bool = field(default=True, **helped("show a progress bar"))
    plot: bool = field(default=True, **helped("draw the run's plots"))

    COMMAND: ClassVar[str] = "rl_train_transfer"

    def __post_init__(self):
        self.method = str(self.method).lower()
        if self.method not in METHODS:
            raise TrainerInputError(f"unknown --method {self.method!r}: use online or sft")
        at_least(self, 1, "max_steps", "eval_interval", "batch_size", "micro_batch", "threads", "actors")
        self.device = check_device(self.device)
        self.report_to = check_report_to(self.report_to)


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
