"""Reporting the TRL way: `--report-to tensorboard | wandb | none` for every trainer, from one place.

Why here and not in each trainer: every trainer logs its metrics through its RunFolder (train_log.jsonl), so
the run folder hands the same records to one reporter, and a dashboard shows exactly the values the log
holds. Tags follow transformers' Trainer integrations: `train/<key>` (`eval/<key>` for evaluation records,
which carry `"eval": true`), the step as the x axis.

- tensorboard: event files in `<run folder>/tb/` (torch.utils.tensorboard, what transformers' own
  TensorBoardCallback uses). A resumed run purges the steps after the checkpoint it restarts from.
- wandb: `wandb.init(project=$WANDB_PROJECT or "lachesis", name=id=run id, dir=<run folder>, config=...)`;
  WANDB_MODE=offline logs without an account (`wandb sync <run folder>/wandb/offline-run-*` uploads later).
- none: nothing (the default).

A trainer that does not go through RunFolder calls `make_reporter` and then `log(step, record)` and
`finish(summary)` on what it returns.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Protocol

from trainers.runtime.errors import TrainerInputError

REPORT_TO = ("none", "tensorboard", "wandb")
REPORT_TO_HELP = ("where to report metrics besides train_log.jsonl: none | tensorboard (event files in the run "
                  "folder's tb/) | wandb (WANDB_MODE=offline works without an account)")
TB_DIR = "tb"
_NEEDS = {"tensorboard": ("tensorboard", "pip install tensorboard (it is in lachesis[train])"),
          "wandb": ("wandb", "pip install wandb, then set WANDB_MODE=offline to log without an account")}


def check_report_to(value: str) -> str:
    """A `--report-to` value, normalised, or the one-line error; a backend that is not installed is one too (found
    without importing it, so a config validates in no time, before any data is read)."""
    v = str(value or "none").strip().lower()
    if v not in REPORT_TO:
        raise TrainerInputError(f"unknown --report-to {value!r}: use {', '.join(REPORT_TO)}")
    if v in _NEEDS and importlib.util.find_spec(_NEEDS[v][0]) is None:
        raise TrainerInputError(f"--report-to {v} needs the {_NEEDS[v][0]} package: {_NEEDS[v][1]}")
    return v


def scalars(record: dict) -> dict[str, float]:
    """The numeric fields of a train_log.jsonl record as tags (`train/loss`, or `eval/...` for an eval record)."""
    prefix = "eval/" if record.get("eval") is True else "train/"
    return {prefix + k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class Reporter(Protocol):
    def log(self, step: int, record: dict) -> None: ...

    def finish(self, summary: dict) -> None: ...


class NoReporter:
    def log(self, step: int, record: dict) -> None:
        pass

    def finish(self, summary: dict) -> None:
        pass


class TensorBoardReporter:
    def __init__(self, run_dir: Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(run_dir) / TB_DIR
        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=resume_step)

    def log(self, step: int, record: dict) -> None:
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()  # a crashed run keeps what it logged, as train_log.jsonl does

    def finish(self, summary: dict) -> None:
        self.writer.close()


class WandbReporter:
    def __init__(self, run_dir: Path, run_id: str, config: dict):
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "lachesis"), name=run_id, id=run_id,
                              dir=str(run_dir), config=config, resume="allow")

    def log(self, step: int, record: dict) -> None:
        self.run.log(scalars(record), step=step)

    def finish(self, summary: dict) -> None:
        self.run.summary.update(scalars(summary))
        self.run.finish()


def make_reporter(report_to: str, run_dir: Path, run_id: str, config: dict,
                  resume_step: int | None = None) -> Reporter:
    """The reporter for a `--report-to` value. `resume_step`: the first step a resumed run logs again (its
    later TensorBoard points are dropped; W&B resumes the run with the same id)."""
    kind = check_report_to(report_to)
    if kind == "tensorboard":
        return TensorBoardReporter(run_dir, resume_step)
    if kind == "wandb":
        return WandbReporter(run_dir, run_id, config)
    return NoReporter()
