"""`lake ui`: the read-only web UI and its read API over one lake, served alone (`lake serve` carries the same
router beside its ingest routes). Options come from ui/config.py's UiConfig, built as every config command's are
(lachesis/console.py `config_command`); fastapi and uvicorn are imported inside the command body."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from edge.options import HTTP_LIMIT_OPTIONS
from edge.tokens import auth_summary
from lachesis.console import Extra, LakeOption, config_command
from ui.config import UiConfig

UI_OPTIONS = [
    Extra("lake", Optional[Path], LakeOption), ("host", "--host"), ("port", "--port"),
    ("token", "--token", {"envvar": ["LACHESIS_TOKEN", "LAKE_TOKEN"], "show_envvar": True}),
    ("token_file", "--token-file"), ("allowed_hosts", "--allowed-hosts"), ("query_timeout", "--query-timeout"),
    ("query_memory_mb", "--query-memory-mb"),
    ("runs", "--runs"), ("exports", "--exports"), ("screenshots", "--screenshots"),
    ("log_level", "--log-level"), ("limits", HTTP_LIMIT_OPTIONS),
]


def ui(values: dict, as_json: bool, quiet: bool) -> None:
    """Serve the read-only web UI (/ui) and its read API (/v1/trajectories, /v1/runs, /v1/versions) over a lake."""
    from lake import open_lake
    from ui.app import serve

    lake = values.pop("lake")
    cfg = UiConfig(**values)
    root = open_lake(lake).root  # never creates one: a mistyped --lake is one line
    if not cfg.token and not cfg.loopback:
        print(f"WARNING: lake ui listens on {cfg.host}, beyond this machine, WITHOUT A TOKEN: anyone who can reach "
              f"port {cfg.port} can read the whole lake. Set LACHESIS_TOKEN or --token-file.", file=sys.stderr,
              flush=True)
    print(f"lake ui: http://{cfg.host}:{cfg.port}/ui lake={root} {auth_summary(cfg.tokens)}", file=sys.stderr,
          flush=True)
    serve(root, cfg)


def register(app: typer.Typer) -> None:
    app.command("ui", help=ui.__doc__)(config_command(UiConfig, UI_OPTIONS, ui, output_options=False))
