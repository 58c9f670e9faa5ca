"""`lake serve`, `lake watch`, `lake import`: the ingest wing's commands.

Options take their defaults and help from the commands' config dataclasses (ingest/config.py), generated from their
fields as every config command's are (lachesis/console.py `config_command`). Heavy modules (fastapi, uvicorn,
watchdog, the lake) are imported inside the command bodies so `lake sql` stays fast.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from edge.options import HTTP_LIMIT_OPTIONS
from edge.tokens import auth_summary
from ingest.config import FolderWatchConfig, ImportConfig, ServeConfig
from lachesis.console import Extra, JsonOption, LakeOption, config_command, fail, literal, new_console, print_json


SERVE_OPTIONS = [
    ("host", "--host"), ("port", "--port"),
    ("token", "--token", {"envvar": ["LACHESIS_TOKEN", "LAKE_TOKEN"], "show_envvar": True}),
    ("token_file", "--token-file"), ("allowed_hosts", "--allowed-hosts"), Extra("lake", Optional[Path], LakeOption),
    ("max_body_mb", "--max-body-mb"), ("max_inflated_mb", "--max-inflated-mb"),
    ("max_inflate_ratio", "--max-inflate-ratio"), ("log_level", "--log-level"), ("serve_mode", "--serve-mode"),
    ("bind_retry_s", "--bind-retry-s"), ("compact_interval", "--compact-interval"),
    ("limits", HTTP_LIMIT_OPTIONS), ("fsync", "--fsync/--no-fsync", {"hidden": True}),
    Extra("ctx", typer.Context),  # where --token came from (a warning when it is the command line)
]


def serve(values: dict, as_json: bool, quiet: bool) -> None:
    """Serve the durable trajectory API: native /v1 routes and the Atropos run-api routes."""
    from ingest.app import serve as _serve
    from lake import Lake, resolve_root

    ctx, lake = values.pop("ctx"), values.pop("lake")
    cfg = ServeConfig(**values)
    host, port, token = cfg.host, cfg.port, values["token"]
    # reached before serving: an unreachable store is one line here, a traceback in uvicorn's startup
    root = Lake.init(resolve_root(lake), fsync=cfg.fsync).root
    source = ctx.get_parameter_source("token")  # typer's own click: compared by name
    if token and source is not None and source.name == "COMMANDLINE":
        print("warning: --token shows in `ps` to every user of this machine; pass it as LACHESIS_TOKEN or "
              "--token-file", file=sys.stderr, flush=True)
    if not cfg.token and not cfg.loopback:
        print(f"WARNING: lake serve listens on {host}, beyond this machine, WITHOUT A TOKEN: anyone who can reach "
              f"port {port} can write into the lake, drain /batch and reset the queue. Set LACHESIS_TOKEN or "
              "--token-file.", file=sys.stderr, flush=True)
    print(f"lake serve: http://{host}:{port} lake={root} {auth_summary(cfg.tokens)}", file=sys.stderr, flush=True)
    from ui.routes import ui_router  # the read-only UI and read API, behind this server's guards and limits
    _serve(root, cfg, routers=[ui_router(root)])


WATCH_OPTIONS = [
    ("skills", "--skills"), ("inbox", "--inbox"), ("hermes_dir", "--hermes-dir"),
    Extra("lake", Optional[Path], LakeOption), ("settle", "--settle"),
    Extra("once", bool, typer.Option(False, "--once", help="Reconcile once, print what changed and exit (no watching).")),
    Extra("json", bool, JsonOption), ("interval", "--interval"), ("max_file_mb", "--max-file-mb"),
    ("max_inflate_ratio", "--max-inflate-ratio"), ("compact_interval", "--compact-interval"),
]


def watch(values: dict, as_json: bool, quiet: bool) -> None:
    """Watch a skills folder (SKILL.md, .usage.json) and an inbox of trajectory files."""
    import contextlib
    import signal
    import threading

    from ingest.watch import Watcher
    from lake import CompactThresholds, Lake

    lake, once, json = values.pop("lake"), values.pop("once"), values.pop("json")
    cfg = FolderWatchConfig(**{**values, "settle": 0 if once else values["settle"]})
    console = new_console(stderr=True)
    lk = Lake.init(lake)  # `lake watch` may create the lake it is pointed at
    for d in (cfg.skills, cfg.inbox, cfg.hermes_dir):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    w = Watcher(lk, skills_dir=cfg.skills, inbox_dir=cfg.inbox, hermes_dir=cfg.hermes_dir, settle=cfg.settle,
                max_file_bytes=cfg.max_file_bytes,
                inflate_ratio=cfg.max_inflate_ratio, echo=None if json else (lambda m: console.print(literal(m), highlight=False)))
    if once:
        w.scan()
        if json:
            print_json(w.stats)
        else:
            print(w.summary())
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: (stop.set(), w.wake.set()))
    where = f"inbox={cfg.inbox}" if cfg.hermes_dir is None else f"hermes-dir={cfg.hermes_dir}"
    console.print(literal(f"watching skills={cfg.skills} {where} lake={lk.root}"), highlight=False)
    # the inbox's and the skills' small commits merged in the background (lake.autocompact), stopped on exit
    compactor = lk.autocompactor(CompactThresholds(interval_s=cfg.compact_interval)) if cfg.compact_interval else None
    with compactor or contextlib.nullcontext():
        w.run(stop, interval=cfg.interval)


IMPORT_OPTIONS = [
    Extra("path", Path, typer.Argument(..., help="A trajectory file or a folder of them.")), ("format", "--format"),
    Extra("lake", Optional[Path], LakeOption),
    Extra("json", bool, typer.Option(False, "--json", help="Print a JSON summary instead of the progress bar.")),
]


def import_(values: dict, as_json: bool, quiet: bool) -> None:
    """Import trajectory files (Hermes ShareGPT, Atropos groups, native JSONL); each file is all or nothing."""
    from ingest.importer import run_import
    from lake import Lake

    path, lake, json = values.pop("path"), values.pop("lake"), values.pop("json")
    cfg = ImportConfig(**values)
    if not path.exists():
        fail(f"{path} does not exist")
    lk = Lake.init(lake)  # `lake import` may create the lake it is pointed at
    summary = run_import(lk, path, cfg.format) if json else _import_with_progress(lk, path, cfg.format)
    d = summary.to_dict()
    if json:
        print_json(d)
    else:
        c = new_console()
        c.print(f"{d['appended']} trajectories appended, {d['duplicates']} duplicates, "
                f"{d['rejected']} file(s) rejected, {len(d['files'])} file(s) in {d['seconds']}s")
        for f in d["files"]:
            if f["error"]:
                where = f" line {f['line']}" if f["line"] else ""
                c.print(f"[red]rejected[/] {literal(f['path'])}{where}: {literal(f['error'])}", highlight=False)
    if summary.rejected:
        raise typer.Exit(1)


def _import_with_progress(lk, path: Path, fmt: str):
    """run_import with a progress bar over the bytes of the files (a gzip file jumps at its end)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from ingest.importer import list_files, run_import

    sizes = {}
    for f in list_files(path):
        try:
            sizes[f] = f.stat().st_size
        except OSError:
            sizes[f] = 0
    total = sum(sizes.values())
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=new_console(stderr=True)) as prog:
        task = prog.add_task("import", total=total or None)
        done = 0
        current: list[Path] = []

        def start(p: Path):
            nonlocal done
            if current:
                done += sizes.get(current[-1], 0)
                prog.update(task, completed=done)
            current[:] = [p]
            prog.update(task, description=f"import {literal(p.name)}")

        def advance(nbytes: int):
            if current and not current[-1].name.lower().endswith(".gz"):
                prog.advance(task, nbytes)

        summary = run_import(lk, path, fmt, on_file_start=start, progress=advance)
        prog.update(task, completed=total)
    return summary


def register(app: typer.Typer) -> None:
    app.command("serve", help=serve.__doc__)(config_command(ServeConfig, SERVE_OPTIONS, serve, output_options=False))
    app.command("watch", help=watch.__doc__)(config_command(FolderWatchConfig, WATCH_OPTIONS, watch,
                                                            output_options=False))
    app.command("import", help=import_.__doc__)(config_command(ImportConfig, IMPORT_OPTIONS, import_,
                                                               output_options=False))
