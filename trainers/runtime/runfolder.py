"""The run protocol every trainer writes: one folder per run, and one `runs` event in the lake.

Why one class: SFT and DPO each wrote their own folder and drifted (DPO's lake event said kind "train" while its
summary said "instruct-dpo"). Every trainer (SFT, DPO, and the online RL, transfer and streaming trainers to
come) goes through a RunFolder, so the layout, the summary and the event agree by construction:

    runs/<run_id>/
      config.json        the command's settled config (trainers/sft/config.py) and the resolved model path
      manifest.json      the data: files and hashes, the export's lake versions, filters, counts
      train_log.jsonl    one line per logged optimizer step, then one {"summary": true, ...} line
      loss.png           the loss curve (trainers/runtime/plots.py)
      adapter/ | model/  the LoRA adapter, or the complete fine-tuned model; the tokenizer beside either
      summary.json       what the command prints; the same kind, metrics and paths as the runs event

The lake is opened when the folder is made, before any data is read or any step is trained: a mistyped
--lake is an error (`Lake.open` never creates a lake), not a new lake nor an hour of training lost at the end.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Iterator, Protocol

from rich.markup import escape

from ground.jsonl import read_jsonl
from lake import Lake, LakeError, open_lake
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import TINY_MARKER, weights_sha256
from trainers.runtime.reporting import NoReporter, Reporter, make_reporter


class RunConfig(Protocol):
    """What a run folder reads of a command's config (SFTConfig, InstructConfig, OnlineConfig, ...)."""

    COMMAND: ClassVar[str]
    output: str | None
    lake_root: str | None
    record_in_lake: bool
    report_to: str
    plot: bool
    full: Any


KIND = "train"  # the runs table's kind of every training run (eval runs are "eval"); the method says which


NO_LAKE = "train without recording the run (--no-lake)"


def trainer_lake(lake_root: str | None, or_else: str | None = None) -> Lake:
    """lake.open_lake for a trainer: the same one-line message (its ways out and the trainer's own `or_else`),
    raised as the trainers' TrainerInputError."""
    try:
        return open_lake(lake_root, or_else=or_else)
    except LakeError as exc:
        raise TrainerInputError(str(exc)) from None


class RunFolder:
    """One training run's folder and lake event. Create with `RunFolder.create(config, method, trainer)`."""

    def __init__(self, run_id: str, path: Path, config: RunConfig, method: str, trainer: str, lake: Lake | None):
        self.run_id, self.path, self.method, self.trainer, self.lake = run_id, path, method, trainer, lake
        self.config = config
        self.model_path: str | None = None
        self.manifest: dict = {}
        self.saved: Path | None = None
        self.warnings: list[str] = []
        self.log_path = path / "train_log.jsonl"
        self._log = None
        self.reporter: Reporter = NoReporter()  # --report-to: start_reporting()

    @classmethod
    def create(cls, config: RunConfig, method: str, trainer: str) -> "RunFolder":
        """Open the lake (when recording) and make the run's empty folder; a non-empty --output is refused."""
        lake = trainer_lake(config.lake_root, NO_LAKE) if config.record_in_lake else None
        run_id = f"{method}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        path = Path(config.output or Path("runs") / run_id).expanduser()
        if path.exists() and any(path.iterdir()):
            raise TrainerInputError(f"output folder {path} is not empty: pass a new --output folder")
        path.mkdir(parents=True, exist_ok=True)
        return cls(run_id, path, config, method, trainer, lake)

    @classmethod
    def reopen(cls, path: Path, run_id: str, config, method: str, trainer: str, log_lines: int) -> "RunFolder":
        """A stopped run's folder, to continue it from a checkpoint: train_log.jsonl keeps its first `log_lines`
        lines (what the checkpoint had logged; the steps after it are trained again) and new lines append."""
        lake = trainer_lake(config.lake_root, NO_LAKE) if config.record_in_lake else None
        run = cls(run_id, Path(path), config, method, trainer, lake)
        kept = run.log_path.read_text().splitlines(keepends=True)[:log_lines] if run.log_path.exists() else []
        run.log_path.write_text("".join(kept))
        run._log = run.log_path.open("a")
        manifest = run.path / "manifest.json"
        run.manifest = json.loads(manifest.read_text()) if manifest.is_file() else {}
        return run

    @contextmanager
    def setting_up(self) -> Iterator["RunFolder"]:
        """Reading the data and the model: a failure here removes the folder (no half-made runs to clean up)."""
        try:
            yield self
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def write_json(self, name: str, obj: dict) -> Path:
        p = self.path / name
        p.write_text(json.dumps(obj, indent=2, default=str))
        return p

    def warn(self, line: str, console=None) -> None:
        """One line for the user now (on `console`, else stderr) and in summary.json's warnings."""
        self.warnings.append(line)
        if console is not None:
            console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
        else:
            print(f"warning: {line}", file=sys.stderr, flush=True)

    def write_config(self, config: RunConfig, model_path: str) -> None:
        """The settled config (full / lr decided) the run trains with."""
        self.config, self.model_path = config, model_path
        self.write_json("config.json", {**asdict(config), "command": config.COMMAND, "method": self.method,
                                        "model_path": model_path})

    def write_manifest(self, manifest: dict) -> None:
        self.manifest = manifest
        self.write_json("manifest.json", manifest)

    def start_reporting(self, report_to: str) -> None:
        """From now on every logged step also goes to the `--report-to` reporter (trainers/runtime/reporting.py), after
        write_config. A reopened run's reporter resumes after the last step its kept log holds."""
        kept = read_jsonl(self.log_path)[0] if self.log_path.exists() else []
        steps = [s for s in (rec.get("step") for rec in kept) if isinstance(s, int)]
        self.reporter = make_reporter(report_to, self.path, self.run_id, asdict(self.config),
                                      resume_step=max(steps) + 1 if steps else None)

    def log(self, record: dict) -> None:
        """One line of train_log.jsonl, flushed (a crashed run keeps its log)."""
        if self._log is None:
            self._log = self.log_path.open("w")
        self._log.write(json.dumps(record) + "\n")
        self._log.flush()
        if "step" in record and not record.get("summary"):
            self.reporter.log(record["step"], record)

    def save_model(self, save, tokenizer, full: bool) -> Path:
        """`save(folder)` writes the adapter (LoRA) or the whole model (full) into adapter/ or model/; the
        tokenizer goes beside it, so either folder is what `hermes_eval --adapter` and `--model` load."""
        folder = self.path / ("model" if full else "adapter")
        save(str(folder))
        tokenizer.save_pretrained(folder)
        marker = Path(self.model_path or "") / TINY_MARKER
        if full and marker.is_file():  # a fine-tuned copy of a from-scratch model is still one (full FT by default)
            shutil.copy2(marker, folder / TINY_MARKER)
        self.saved = folder
        return folder

    def finish(self, metrics: dict, model_label: str, data: str, **fields) -> dict:
        """Close the log, draw loss.png, write summary.json and append the runs event. Returns the summary."""
        self.log({"summary": True, **metrics})
        self._log.close()
        self.reporter.finish(metrics)
        plot = None
        if self.config.plot:
            # imported here: matplotlib costs every command that merely imports the run folder 0.4 s of CPU
            from trainers.runtime.plots import write_loss_plot

            plot = write_loss_plot(self.log_path, self.path / "loss.png", title=f"{self.run_id} ({model_label})",
                                   method=self.method)
        summary = {"run_id": self.run_id, "kind": KIND, "command": self.config.COMMAND, "method": self.method,
                   "status": "completed", "model": model_label, "model_path": self.model_path,
                   "adapter_path": str(self.saved), "run_dir": str(self.path), "full": self.config.full, "data": data,
                   "loss_plot": str(plot) if plot else None, "warnings": self.warnings, **fields, **metrics}
        self.write_json("summary.json", summary)
        if self.lake is not None:
            res = self.lake.append("runs", [{
                "run_id": self.run_id, "kind": KIND, "status": "completed", "model": model_label,
                "adapter_path": str(self.saved.resolve()), "config": asdict(self.config), "metrics": metrics,
                "manifest": self.manifest,
                "metadata": {"run_dir": str(self.path.resolve()), "trainer": self.trainer, "command": self.config.COMMAND,
                             "method": self.method, "full": self.config.full,
                             "adapter_sha256": weights_sha256(self.saved) if self.saved else None}}])
            summary["lake_version"] = res.version
            self.write_json("summary.json", summary)
        return summary
