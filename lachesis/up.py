"""`just up` (python -m lachesis.up): the lake server, the skills + inbox watcher and the streaming trainer in one
command, under lachesis/supervisor.py: one live status line per component, a crashed one restarted with backoff,
Ctrl-C stops them all.

The lake is created first (an explicit `up` may, like `lake serve`), so the trainer, which never creates a lake,
finds it. Each component is the `lake` command a user could run alone, with this config's options.
"""
from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer

from lachesis.console import fail, option, run
from lachesis.supervisor import Component, Supervisor
from trainers.config import helped


@dataclass(kw_only=True)
class UpConfig:
    """just up: which lake, where the server listens, what the watcher and the trainer follow."""

    lake_root: str | None = field(default=None, **helped("the lake (created if missing; default $LAKE_ROOT or ./data/lake)"))
    host: str = field(default="127.0.0.1", **helped("lake serve's address"))
    port: int = field(default=8000, **helped("lake serve's port"))
    skills: str = field(default="data/skills", **helped("the skills folder lake watch follows"))
    inbox: str = field(default="data/inbox", **helped("the folder of trajectory files lake watch imports"))
    recipe: str = field(default="sft", **helped("the streaming trainer's recipe: sft | instruction"))
    model: str = field(default="tiny", **helped("the streaming trainer's model: tiny | smollm2 | a folder"))
    train_args: str = field(default="", **helped("more options for `lake train watch`, e.g. '--min-rows 32 --replay 0'"))
    logs: str = field(default="runs/up-logs", **helped("where each component's output goes (<name>.log)"))
    no_train: bool = field(default=False, **helped("run only the server and the watcher"))

    def __post_init__(self):
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        if self.recipe not in ("sft", "instruction"):
            raise ValueError(f"unknown --recipe {self.recipe!r}: use sft or instruction")


def lake_command(*args: str) -> list[str]:
    """argv of a `lake` subcommand run by this interpreter (the venv's, whatever PATH says). -P: the working
    directory is not put on sys.path, so a folder there named like one of our packages (a lake at ./lake) is not
    imported in its place."""
    return [sys.executable, "-P", "-c", "from lachesis.cli import main; main()", *args]


def components(cfg: UpConfig, root: Path) -> list[Component]:
    lake = ["--lake", str(root)]
    out = [Component("serve", lake_command("serve", *lake, "--host", cfg.host, "--port", str(cfg.port))),
           Component("watch", lake_command("watch", *lake, "--skills", cfg.skills, "--inbox", cfg.inbox))]
    if not cfg.no_train:
        out.append(Component("train", lake_command("train", "watch", *lake, "--recipe", cfg.recipe, "--model",
                                                   cfg.model, *cfg.train_args.split())))
    return out


def _render(rows: list[dict]):
    """One line per component, cut at the terminal's width: name, state, restarts, its last output line."""
    from rich.console import Group
    from rich.text import Text

    return Group(*(Text.assemble((f"{r['name']:<6}", "bold"), f" {r['state']:<34} restarts {r['restarts']:<3} ",
                                 (r["last"], "dim"), no_wrap=True, overflow="ellipsis") for r in rows))


def up(
    lake: Optional[str] = option(UpConfig, "lake_root", "--lake"),
    host: str = option(UpConfig, "host", "--host"),
    port: int = option(UpConfig, "port", "--port"),
    skills: str = option(UpConfig, "skills", "--skills"),
    inbox: str = option(UpConfig, "inbox", "--inbox"),
    recipe: str = option(UpConfig, "recipe", "--recipe"),
    model: str = option(UpConfig, "model", "--model"),
    train_args: str = option(UpConfig, "train_args", "--train-args"),
    logs: str = option(UpConfig, "logs", "--logs"),
    no_train: bool = option(UpConfig, "no_train", "--no-train"),
) -> None:
    """Serve the lake, watch skills + inbox and train as data lands; Ctrl-C stops everything."""
    from rich.console import Console
    from rich.live import Live

    from lake import Lake

    try:
        cfg = UpConfig(lake_root=lake, host=host, port=port, skills=skills, inbox=inbox, recipe=recipe, model=model,
                       train_args=train_args, logs=logs, no_train=no_train)
    except ValueError as exc:
        fail(str(exc))
    root = Lake.init(cfg.lake_root).root
    console = Console(stderr=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sup = Supervisor(components(cfg, root), Path(cfg.logs), on_event=lambda m: console.print(m, highlight=False))
    console.print(f"lake {root}; logs in {cfg.logs}/; Ctrl-C stops everything", highlight=False)
    with Live(_render([]), console=console, refresh_per_second=2, transient=False) as live:
        sup.run(stop, lambda rows: live.update(_render(rows)))
    console.print("stopped", highlight=False)


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(up)
    run(app, prog_name="just up")


if __name__ == "__main__":
    main()
