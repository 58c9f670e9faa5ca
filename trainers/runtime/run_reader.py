"""The one reader of a run on disk: what a command finds in the folder it was given as a run.

Every command that starts from a run (`hermes_eval --adapter`, `rl_train_online --init` and `--resume`,
`lake export-model RUN`, `lake serve-model --adapter` and `--follow`) opens it with `RunReader.open(ref, option)`
and asks it for the weights of a step, its checkpoints or the config it ran with. The folder may be

    a run folder        runs/<run_id>/: config.json, adapter/ (LoRA) or model/ (full), maybe checkpoints/
    a trainer folder    runs/watch-sft/: checkpoints/step-<N>/ only (the streaming and online trainers)
    a checkpoint        .../checkpoints/step-<N>/: weights/ and state.json
    the weights         an adapter/ or model/ folder itself (or any LoRA adapter or model folder)

RunFolder (trainers/runtime/runfolder.py) writes the first; trainers/runtime/checkpoint.py the checkpoints. A ref
that is none of these is one line naming what was looked for.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ground.files import Refusal, read_named
from trainers.runtime import checkpoint
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import is_adapter_folder, is_model_folder

RUNS = Path("runs")  # where a run id (`--resume sft-20261201-...`) is looked for
RUN_CONFIG = "config.json"  # a run's own names its command and model_path; a model folder's is the model's
RUN_CONFIG_BYTES = 1 << 20
WEIGHTS = ("adapter", "model")  # a finished run's weights: LoRA, or the whole fine-tuned model


@dataclass(frozen=True)
class RunReader:
    """A folder given as a run, opened for reading. `option` is the flag that named it, for the messages."""

    path: Path
    option: str

    @classmethod
    def open(cls, ref: str | Path, option: str, *, by_id: bool = False) -> "RunReader":
        """The folder `ref` (with `by_id`, also a run id under runs/); a one-line error when it is not there."""
        p = Path(ref).expanduser()
        if not p.is_dir() and by_id and (RUNS / str(ref)).is_dir():
            p = RUNS / str(ref)
        if not p.is_dir():
            also = f" nor {RUNS / str(ref)}" if by_id else ""
            raise TrainerInputError(f"{option} {ref}: no run folder there ({p}{also} does not exist): pass a run "
                                    "folder such as runs/<run_id>")
        return cls(p, option)

    def config(self) -> dict:
        """The config the run recorded (RunFolder's config.json, with its command and model_path), read from the
        run folder or, for its adapter/ or model/, from the folder above; {} when there is none."""
        for folder in (self.path, self.path.parent):
            try:  # a regular file of bounded size: a FIFO or a device named config.json never blocks the reader
                cfg = json.loads(read_named(folder / RUN_CONFIG, RUN_CONFIG_BYTES))
            except (OSError, Refusal, ValueError):
                continue
            if isinstance(cfg, dict) and ("command" in cfg or cfg.get("model_path")):
                return cfg
        return {}

    def run_config(self) -> dict:
        """The run folder's own config.json, read as it is: OSError, Refusal or ValueError when it is not there or
        not JSON (what an actor of the run, which never gets a user's path, reports in its log)."""
        return json.loads(read_named(self.path / RUN_CONFIG, RUN_CONFIG_BYTES))

    def require_config(self) -> dict:
        """run_config() of a folder a user named as a run (--resume, --from), or one line saying it is none."""
        try:
            cfg = self.run_config()
        except (OSError, Refusal, ValueError) as exc:
            raise TrainerInputError(f"{self.option} {self.path}: no run folder there ({RUN_CONFIG}: "
                                    f"{str(exc).splitlines()[0][:160]}): pass the folder a training command wrote, "
                                    "runs/<run_id>") from None
        if not isinstance(cfg, dict) or "command" not in cfg:
            raise TrainerInputError(f"{self.option} {self.path}: no run folder there ({RUN_CONFIG} is not a run's): "
                                    "pass the folder a training command wrote, runs/<run_id>")
        return cfg

    def checkpoints(self) -> dict[int, Path]:
        """The run's complete checkpoints by step, oldest first ({} for a folder that keeps none)."""
        return {checkpoint.step_of(c): c for c in checkpoint.complete(self.path)}

    def is_checkpoint(self) -> bool:
        return checkpoint.weights(self.path).is_dir() and (self.path / "state.json").is_file()

    def finished_weights(self) -> Path | None:
        """A finished run's adapter/ or model/, or the folder itself when it is an adapter or model folder."""
        for folder in [self.path / name for name in WEIGHTS] + [self.path]:
            if is_adapter_folder(folder) or is_model_folder(folder):
                return folder
        return None

    def weights(self, step: int | None = None) -> tuple[Path, int | None]:
        """The weights folder to load and the checkpoint step it holds (None for a finished run's weights).
        `step`: that checkpoint of a trainer folder. None: a checkpoint folder's own weights, else the finished
        run's adapter/ or model/, else the newest checkpoint."""
        if self.is_checkpoint():
            return checkpoint.weights(self.path), int(checkpoint.read_state(self.path)["step"])
        finished = self.finished_weights() if step is None else None
        if finished is not None:
            return finished, None
        found = self.checkpoints()
        if not found:
            if step is not None:
                raise TrainerInputError(f"--step {step}: {self.path} has no checkpoints/ (only streaming and online "
                                        "trainers write them)")
            raise TrainerInputError(f"{self.option} {self.path} has no adapter/ or model/ folder, no checkpoints/ and "
                                    "is neither a LoRA adapter (adapter_config.json) nor a model folder (config.json + "
                                    "weights): pass a run folder a training command wrote, runs/<run_id>")
        step = max(found) if step is None else step
        if step not in found:
            raise TrainerInputError(f"{self.path} has no checkpoint of step {step}: it keeps steps {sorted(found)}")
        return checkpoint.weights(found[step]), step
