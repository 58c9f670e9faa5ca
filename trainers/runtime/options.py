"""What every command's typed config shares: the options every trainer takes (CommonConfig, ModelConfig), with
one spelling and one help text each, the bound checks and the default seed. The help-text helper is the ground's
(ground/options.py), imported here for the trainers' configs."""
from __future__ import annotations

from dataclasses import dataclass, field

from ground import ranges
from ground.options import helped
from trainers.runtime.device import check_device
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.reporting import REPORT_TO_HELP, check_report_to


def at_least(cfg, minimum: float, *names: str) -> None:
    """`__post_init__` validation: each named field (None = unset) is at least `minimum`, else the one-line error
    (ground/ranges.py's check, in the trainers' TrainerInputError)."""
    ranges.at_least(cfg, minimum, *names, error=TrainerInputError)


def positive(cfg, *names: str) -> None:
    """`__post_init__` validation: each named field (None = unset) is above 0, else the one-line error
    (ground/ranges.py's check, in the trainers' TrainerInputError)."""
    ranges.positive(cfg, *names, error=TrainerInputError)


DEFAULT_SEED = 0
MODEL_HELP = "tiny | smollm2 | hermes-3 | a local model folder | a hub id"
LAKE_HELP = "an existing lake, for the run's data and its events (default $LAKE_ROOT or ./data/lake)"
THREADS_HELP = "torch threads (default 1 or $LACHESIS_THREADS)"
DEVICE_HELP = "auto (cuda when available) | cpu | cuda | cuda:N; bf16 only on a GPU"


@dataclass(kw_only=True)
class CommonConfig:
    """The options every training command shares (SFT, instruction tuning, online RL, transfer, the streaming
    trainer): where the lake is, the seed, torch threads, the device and where metrics are reported. A command's
    config derives from it (a field may be declared again with the command's own default, as online RL's seed)."""

    lake_root: str | None = field(default=None, **helped(LAKE_HELP))
    seed: int | None = field(default=DEFAULT_SEED, **helped("seed of everything the run draws: initialisation, data "
                                                            "order, sampling"))
    threads: int | None = field(default=None, **helped(THREADS_HELP))
    device: str = field(default="auto", **helped(DEVICE_HELP))
    report_to: str = field(default="none", **helped(REPORT_TO_HELP))

    def __post_init__(self):
        at_least(self, 1, "threads")
        self.device = check_device(self.device)
        self.report_to = check_report_to(self.report_to)


@dataclass(kw_only=True)
class ModelConfig(CommonConfig):
    """CommonConfig and the model a command trains from (every trainer but rl_train_transfer, whose model is its
    transfer spec's)."""

    model: str = field(default="tiny", **helped(MODEL_HELP))


GRADIENT_CHECKPOINTING_HELP = (
    "recompute activations in the backward pass instead of keeping them: less memory, same gradients (SmolLM2 on a "
    "CPU: 4.1 instead of 6.8 GB for a 2,000-token SFT sequence, 6.2 instead of 11.1 GB for a GRPO update of two)")
