"""`lake export-model RUN --output DIR`: a run's weights as a full Hugging Face model folder (trainers/export/merged.py).

Options are fields of ExportModelConfig (default and help from there); a bad value or run is one line, exit 2.
"""
from __future__ import annotations

import typer

from lachesis.console import config_command, new_console, print_json
from trainers.export.config import ExportModelConfig

EXPORT_OPTIONS = [("run",), ("output", "--output", "-o"), ("format", "--format"), ("model", "--model"),
                  ("step", "--step"), ("dtype", "--dtype")]


def _export(values: dict, as_json: bool, quiet: bool) -> None:
    from trainers.export.merged import export_model

    info = export_model(ExportModelConfig(**values), new_console(stderr=True, quiet=quiet or as_json))
    if as_json:
        print_json(info)
    elif not quiet:
        what = f"{info['weights']} merged into {info['base_model']}" if info["lora"] else info["weights"]
        print(f"exported {what} -> {info['output']} ({info['parameters']:,} parameters, {info['dtype']}, "
              f"{info['export_s']:.1f} s)")


def register(app: typer.Typer) -> None:
    app.command("export-model", help="Export a run's model as one Hugging Face folder (a LoRA adapter merged into its "
                                     "base) for vLLM, TGI or transformers.")(
        config_command(ExportModelConfig, EXPORT_OPTIONS, _export))
