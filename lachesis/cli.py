"""The `lake` command: composed from each wing's command module.

Every wing module exposes `register(app)` and imports its heavy dependencies inside the command bodies,
so `lake sql` never pays for fastapi or torch.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Optional

import typer

from lachesis.console import App, run

app = App(
    name="lake",
    help="Lachesis: the event lake for agent trajectories and skills. Lake root: --lake, $LAKE_ROOT or ./data/lake.",
    no_args_is_help=True,
)

# Wing command modules, in the order their commands appear in --help. A module that is not written yet is skipped.
WING_MODULES = ["lachesis.lake_cli", "lachesis.ingest_cli", "lachesis.rollout_cli", "lachesis.views_cli",
                "lachesis.train_watch_cli", "lachesis.export_model_cli", "lachesis.samples_cli",
                "lachesis.serve_model_cli", "lachesis.ui_cli"]


def _register_wings() -> None:
    for name in WING_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app)


_register_wings()


@app.callback()
def _lake_root(lake: Optional[Path] = typer.Option(
        None, "--lake", help="Lake root for every command (as $LAKE_ROOT; a command's own --lake wins), e.g. "
                             "`lake --lake data/lake sql ...`.", show_default=False)) -> None:
    if lake is not None:  # every command resolves its default root from $LAKE_ROOT (lake.resolve_root)
        os.environ["LAKE_ROOT"] = str(lake)


def main() -> None:
    run(app, prog_name="lake")
