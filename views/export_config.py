"""The options of the dataset commands: `lake export` (`ExportConfig`), the guide's `atropos_trajectory_export`
(`AtroposExportConfig`: an export of the sft view by default, with the guide's minimum-data warning) and
`lake views` (`ViewsConfig`: the listing an export picks its view from).

A module of its own, without heavy imports (no duckdb, pyarrow or datasets), because the CLI reads the options'
defaults and help from these fields when it starts (lachesis/views_cli.py). Each config checks its values in
`__post_init__` and refuses a bad one with `ExportInputError`: one line naming the option as the user types it.
What needs the lake (the view exists, `--where` parses, `--as-of` pins, the output folder may be written) is
checked by the export itself (views/export.py, ExportError).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ground.errors import UserError
from ground.options import AS_OF_HELP, helped
from ground.ranges import at_least

FORMATS = ("parquet", "jsonl", "hf")  # what `--format` takes: the files of views/export.py, hf: views/export_hf.py
GUIDE_MIN_INTERACTIONS = 50  # the guide's minimum for strategy 1: fine-tune on at least 50 complete interactions


class ExportInputError(UserError, ValueError):
    """A bad `lake export` or `atropos_trajectory_export` option; one line, the CLI prints it and exits 2."""


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """lake export: a view on a pinned lake version as a dataset folder (parquet/jsonl + manifest.json, or a
    Hugging Face datasets folder with a dataset card)."""

    view: str = field(**helped("View to export (see `lake views`), e.g. sft, dpo, replay, instruction."))
    output: Path = field(**helped("Dataset folder to write (new or empty)."))
    format: str = field(default="parquet", **helped(
        "parquet, jsonl, or hf: a Hugging Face datasets folder (save_to_disk) with a dataset card, for "
        "datasets.load_from_disk."))
    as_of: Optional[str] = field(default=None, **helped(AS_OF_HELP))
    where: Optional[str] = field(default=None, **helped(
        "SQL condition on the view's columns, e.g. \"env = 'bash_exec'\"."))
    overwrite: bool = field(default=False, **helped("Replace the dataset in a non-empty output folder."))
    allow_empty: bool = field(default=False, **helped(
        "Write a dataset of 0 rows instead of failing when the view is empty."))
    sets: tuple[str, ...] = field(default=(), **helped(
        "View parameter NAME=VALUE (repeatable), e.g. sft_min_reward=0.8, sft_test_fraction=0.2, dpo_min_gap=0.3."))
    license: Optional[str] = field(default=None, **helped(
        "License id for the hf dataset card (default: unknown), e.g. mit, cc-by-4.0."))
    push_to_hub: Optional[str] = field(default=None, **helped(
        "With --format hf: also publish the folder to this Hub dataset repo (user/name) with datasets' push_to_hub; "
        "needs network and a token (hf auth login)."))
    variables: dict[str, str] = field(init=False, repr=False, compare=False)  # --set as {NAME: VALUE}

    def __post_init__(self):
        object.__setattr__(self, "sets", tuple(self.sets or ()))
        if self.format not in FORMATS:
            raise ExportInputError(f"--format: unknown format {self.format!r}; use {' or '.join(FORMATS)}")
        if self.format != "hf" and (self.license or self.push_to_hub):
            raise ExportInputError("--license and --push-to-hub go with --format hf")
        variables = {}
        for item in self.sets:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ExportInputError(f"--set takes NAME=VALUE, got {item!r}")
            variables[name.strip()] = value
        object.__setattr__(self, "variables", variables)

    def export_arguments(self) -> dict[str, Any]:
        """The keyword arguments views.export.export_view and views.export_hf.export_view_hf share."""
        return dict(as_of=self.as_of, where=self.where, overwrite=self.overwrite, variables=self.variables,
                    allow_empty=self.allow_empty)


@dataclass(frozen=True, kw_only=True)
class AtroposExportConfig(ExportConfig):
    """atropos_trajectory_export: the guide's export of the lake's trajectories as a training dataset, `lake export`
    of the sft view by default, warning when it holds fewer complete interactions than the guide asks for."""

    view: str = field(default="sft", **helped("View to export: sft (default), dpo, replay, trajectories_current..."))
    output: Path = field(**helped("Dataset folder, e.g. trajectories/."))
    min_interactions: int = field(default=GUIDE_MIN_INTERACTIONS, **helped(
        "Warn (stderr, and `interactions` in --json) when the export holds fewer complete interactions (rows) than "
        "this, the guide's minimum for strategy 1, with the count per task; at least 0, 0: no check."))

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 0, "min_interactions", error=ExportInputError)


@dataclass(frozen=True)
class ViewsConfig:
    """lake views: the dataset views and the helper views they use."""

    counts: bool = field(default=False, **helped("Also count each view's rows (runs every view)."))
