"""`lake serve`, `lake watch`, `lake import`: the ingest wing's commands.

Heavy modules (fastapi, uvicorn, watchdog) are imported inside the command bodies so `lake sql` stays fast.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from lachesis.console import LakeOption, fail


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind (loopback by default)."),
    port: int = typer.Option(8000, help="TCP port."),
    token: Optional[str] = typer.Option(None, envvar="LAKE_TOKEN",
                                        help="Bearer token required on every write route."),
    lake: Optional[Path] = LakeOption,
    max_body_mb: float = typer.Option(64.0, help="Largest request body accepted (MiB, as sent)."),
    max_inflated_mb: float = typer.Option(256.0, help="Largest body after gunzip (MiB): the gzip-bomb limit."),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
    serve_mode: str = typer.Option("at-least-once", help="at-least-once: a batch counts as served once the trainer "
                                   "comes back for the next one; after a crash an unconfirmed batch is served "
                                   "again. at-most-once: recorded before it is sent; a batch lost in flight is "
                                   "not re-sent."),
    bind_retry_s: float = typer.Option(0.0, help="Keep trying to bind a port still in use for this long "
                                       "(start a standby that takes over when the running server exits)."),
) -> None:
    """Serve the durable trajectory API: native /v1 routes and the Atropos run-api routes."""
    from ingest.server import serve as _serve
    from lake import resolve_root

    if serve_mode not in ("at-least-once", "at-most-once"):
        raise typer.BadParameter("--serve-mode must be at-least-once or at-most-once")
    root = resolve_root(lake)
    print(f"lake serve: http://{host}:{port} lake={root} auth={'on' if token else 'off'}", file=sys.stderr,
          flush=True)
    _serve(root, host=host, port=port, token=token, max_body=int(max_body_mb * (1 << 20)),
           max_inflated=int(max_inflated_mb * (1 << 20)), log_level=log_level, serve_mode=serve_mode,
           bind_retry_s=bind_retry_s)


def watch(
    skills: Optional[Path] = typer.Option(None, "--skills", help="Hermes skills folder to mirror into the lake."),
    inbox: Optional[Path] = typer.Option(None, "--inbox", help="Folder where trajectory files are dropped."),
    lake: Optional[Path] = LakeOption,
    settle: float = typer.Option(0.5, help="Seconds a file must stay unchanged before it is read."),
    once: bool = typer.Option(False, "--once", help="Reconcile once and exit (no watching)."),
    interval: float = typer.Option(2.0, help="Rescan interval in seconds (watchdog wakes it earlier)."),
    max_file_mb: float = typer.Option(4096.0, help="Largest inbox file accepted, after gunzip (MiB)."),
) -> None:
    """Watch a skills folder (SKILL.md, .usage.json) and an inbox of trajectory files."""
    import signal
    import threading

    from rich.console import Console

    from ingest.watch import Watcher
    from lake import Lake

    if skills is None and inbox is None:
        raise typer.BadParameter("give --skills DIR and/or --inbox DIR")
    console = Console(stderr=True)
    lk = Lake.init(lake)
    for d in (skills, inbox):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    w = Watcher(lk, skills_dir=skills, inbox_dir=inbox, settle=0 if once else settle,
                max_file_bytes=int(max_file_mb * (1 << 20)),
                echo=lambda m: console.print(m, highlight=False))
    if once:
        w.scan()
        console.print(f"done: {w.stats}")
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: (stop.set(), w.wake.set()))
    console.print(f"watching skills={skills} inbox={inbox} lake={lk.root}", highlight=False)
    w.run(stop, interval=interval)


def import_(
    path: Path = typer.Argument(..., help="A trajectory file or a folder of them."),
    format: str = typer.Option("auto", "--format", help="auto | hermes | atropos | native"),
    lake: Optional[Path] = LakeOption,
    json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of the progress bar."),
) -> None:
    """Import trajectory files (Hermes ShareGPT, Atropos groups, native JSONL); each file is all or nothing."""
    import orjson
    from rich.console import Console

    from ingest.formats import FORMATS
    from ingest.importer import list_files, run_import
    from lake import Lake

    if format not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    if not path.exists():
        fail(f"{path} does not exist")
    lk = Lake.init(lake)
    if json:
        summary = run_import(lk, path, format)
    else:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        files = list_files(path)
        total = 0
        for f in files:
            try:
                total += f.stat().st_size
            except OSError:
                pass
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True)) as prog:
            task = prog.add_task("import", total=total or None)
            state = {"done": 0, "cur": None, "gz": False}

            def start(p):
                if state["cur"] is not None:
                    state["done"] += state["cur"].stat().st_size if state["cur"].exists() else 0
                    prog.update(task, completed=state["done"])
                state["cur"] = p
                state["gz"] = p.name.lower().endswith(".gz")
                prog.update(task, description=f"import {p.name}")

            def advance(nbytes):  # bytes of plain files (gzip files jump at their end)
                if not state["gz"]:
                    prog.advance(task, nbytes)

            summary = run_import(lk, path, format, on_file_start=start, progress=advance)
            prog.update(task, completed=total)
    d = summary.to_dict()
    if json:
        sys.stdout.write(orjson.dumps(d).decode() + "\n")
    else:
        c = Console()
        c.print(f"{d['appended']} trajectories appended, {d['duplicates']} duplicates, "
                f"{d['rejected']} file(s) rejected, {len(d['files'])} file(s) in {d['seconds']}s")
        for f in d["files"]:
            if f["error"]:
                where = f" line {f['line']}" if f["line"] else ""
                c.print(f"[red]rejected[/] {f['path']}{where}: {f['error']}", highlight=False)
    if summary.rejected:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("watch")(watch)
    app.command("import")(import_)
