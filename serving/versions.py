"""The served versions every engine keeps, and the errors of the engine interface.

A version is `<name>@<step>` (`Version`): the base (`<name>@base`), a LoRA adapter or a fully fine-tuned model, with
the sha256 of its weights file (trainers/runtime/model_folder.py `weights_sha256`: `sha256sum
adapter_model.safetensors`, as the trainer's `runs` event has it), which every recorded call names. `ServedVersions` is the table an
engine keeps of them: listing, resolving a request's `model` (a version name, or the bare served name for the
newest), installing a new newest; it is replaced whole on change, so request handlers read it without a lock while
the engine thread installs. `label_of` and `run_name` make the two halves of a version's name from `--model` and
`--adapter`. Both engines build on this module: the embedded one (engine.py) and the vLLM one (vllm_engine.py);
neither imports the other. The errors are what the HTTP layer answers for (404 unknown model, 500 failed batch).
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from trainers.runtime import checkpoint
from trainers.modeling.models import model_label
from trainers.runtime.model_folder import adapter_base_differs
from trainers.runtime.model_folder import weights_sha256  # noqa: F401  (the engines' import; one implementation)

from .errors import ServingError


class UnknownModel(LookupError):
    """A request named a model this server does not serve (404)."""


class GenerationFailed(RuntimeError):
    """The model failed on a batch (its requests get a 500; the engine thread serves on)."""


class VersionGone(RuntimeError):
    """The version a queued request was resolved to was unloaded before it ran (--keep-versions)."""


@dataclass
class Version:
    """One servable version of the policy."""

    name: str  # <label>@<step>
    step: str  # the increment number, a run's name, or "base"
    kind: str  # base | lora | full
    path: str | None  # the adapter or model folder (None for the base)
    sha256: str | None  # of its weight files (None for the base)
    created: int = field(default_factory=lambda: int(time.time()))
    model: object = None  # full / base: the model to generate with
    adapter: str | None = None  # lora: the peft adapter name
    gone: bool = False

    def info(self) -> dict:
        return {"name": self.name, "step": self.step, "kind": self.kind, "path": self.path, "sha256": self.sha256,
                "created": self.created}


class ServedVersions:
    """The table of served versions every engine keeps (`label`, `_versions`): listing, resolving a request's
    `model`, installing a new newest. Replaced whole on change (copy on write), so request handlers read it without
    a lock while the engine thread installs."""

    label: str
    _versions: OrderedDict[str, Version]

    def versions(self) -> list[Version]:
        """Served versions, oldest first (the last is what a request for the bare name gets)."""
        return list(self._versions.values())

    def resolve(self, name: str | None) -> Version:
        """The version a request's `model` names: a version name, or the bare served name (or none) for the newest."""
        versions = self._versions
        if not versions:
            raise UnknownModel("no version is loaded yet")
        if not name or name == self.label:
            return next(reversed(versions.values()))
        if name in versions:
            return versions[name]
        raise UnknownModel(f"model {name!r} is not served here: use {self.label!r} (the newest version) or one of "
                           f"{', '.join(versions)}")

    def _install(self, v: Version) -> Version:
        versions = OrderedDict(self._versions)
        versions[v.name] = v
        versions.move_to_end(v.name)
        self._versions = versions
        return v


def label_of(model: str) -> str:
    """The served name of --model: its alias (tiny, smollm2), a hub id's last part, or a folder's name."""
    label = model_label(model)
    return Path(label).name if ("/" in label or label.startswith(".")) else label


def run_name(path: str) -> str:
    """The part after '@' of the version serving the weights folder `path`, so two runs never share a name: a
    streaming trainer's increment is `<serial>:<N>` (its serial, which begins the run_id of each of its `runs`
    events, `<serial>-inc-<N:06d>`, and the increment), a finished run's weights its run_id (summary.json), other
    weights their folder's name. The folder's name stands in for what a run folder does not say."""
    p = Path(path)
    if p.name in ("adapter", "model", "weights"):  # a run's adapter/ or model/, a checkpoint's weights/
        p = p.parent
    if checkpoint.STEP_NAME.fullmatch(p.name):
        n = checkpoint.step_of(p)
        try:  # a regular file only: a FIFO in its place must not hold the follower
            serial = (checkpoint.read_state(p, ("event",))["event"]["metadata"]["serial"]
                      if (p / "state.json").is_file() else None)
        except (checkpoint.CheckpointError, KeyError, TypeError):
            serial = None
        trainer = p.parent.parent  # <trainer folder>/checkpoints/step-<N>
        return f"{serial if isinstance(serial, str) and serial else trainer.name}:{n}"
    try:
        run_id = json.loads((p / "summary.json").read_text()).get("run_id") if (p / "summary.json").is_file() else None
    except (OSError, ValueError, AttributeError):
        run_id = None
    return run_id if isinstance(run_id, str) and run_id else p.name


def check_base(weights: str | Path, base: str) -> None:
    """A LoRA adapter trained on another model than the served base `base` is refused in one line (its
    adapter_config.json's base against the base's folder: trainers/runtime/model_folder.py adapter_base_differs)."""
    other = adapter_base_differs(weights, base)
    if other:
        raise ServingError(f"the adapter {weights} was trained on {other}, not on the served base {base}")
