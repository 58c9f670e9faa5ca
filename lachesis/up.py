"""`just up` (python -m lachesis.up): the lake server, the skills + inbox watcher and the streaming trainer in one
command, under lachesis/supervisor.py: one live status line per component, a crashed one restarted with backoff,
Ctrl-C stops them all. `--serve-model` adds the model server (`lake serve-model --follow` on the trainer's folder):
agents call the newest increment over the OpenAI API, each call lands in the lake the trainer learns from, and each
new increment is served as it is written; the loop agent -> model server -> lake -> trainer -> model server. The
model server serves the base model until the trainer (started at the same time) has written its folder; with
`--from runs/<run>` the trainer continues that run's weights and the server serves them until the first increment,
all under one served name (the model's short name, or `--served-name`), so an agent configured with it keeps
talking to the newest version of that line.

The lake is created first (an explicit `up` may, like `lake serve`), so the trainer, which never creates a lake,
finds it. Each component is the `lake` command a user could run alone, with this config's options.
"""
from __future__ import annotations

import shlex
import signal
import sys
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path

from edge.errors import OptionError
from ingest.config import FolderWatchConfig, ServeConfig
from lachesis.console import config_app, fail, run
from lachesis.supervisor import USAGE_ERROR, Component, Supervisor
from trainers.runtime.options import helped
from trainers.runtime.run_reader import RunReader
from serving.config import ServeModelConfig
from trainers.watch.config import RECIPES, WatchConfig


def like(config: type, name: str, **given):
    """UpConfig's field `name` as the component's own command has it (help and default, unless given): `just up
    --port` is `lake serve --port`, its default and help written once."""
    f = next(f for f in fields(config) if f.name == name)
    return field(default=given.get("default", f.default), **helped(given.get("help", f.metadata["help"])))


@dataclass(kw_only=True)
class UpConfig:
    """just up: which lake, where the server listens, what the watcher and the trainer follow."""

    lake_root: str | None = field(default=None, **helped("the lake (created if missing; default $LAKE_ROOT or ./data/lake)"))
    host: str = like(ServeConfig, "host")
    port: int = like(ServeConfig, "port")
    skills: str = like(FolderWatchConfig, "skills", default="data/skills")
    inbox: str = like(FolderWatchConfig, "inbox", default="data/inbox")
    recipe: str = field(default="sft", **helped(f"the streaming trainer's recipe: {' | '.join(RECIPES)}"))
    model: str = field(default="tiny", **helped("the streaming trainer's model: tiny | smollm2 | a folder"))
    from_run: str | None = field(default=None, **helped(
        "a trained run (runs/<run>) the streaming trainer continues from (`lake train watch --from`) and the model "
        "server serves until the trainer's first increment (`lake serve-model --adapter`), under the served name "
        "(--serve-model-args '--served-name NAME'; default --model's short name)"))
    train_args: str = field(default="", **helped("more options for `lake train watch`, e.g. '--min-rows 32 --replay 0'"))
    logs: str = field(default="runs/up-logs", **helped("where each component's output goes (<name>.log)"))
    no_train: bool = field(default=False, **helped("run only the server and the watcher"))
    serve_model: bool = field(default=False, **helped(
        "also run `lake serve-model --follow` on the streaming trainer's folder: agents call its newest increment "
        "over the OpenAI API on --model-port, and every call is recorded in the lake it trains on"))
    model_port: int = like(ServeModelConfig, "port", help="lake serve-model's TCP port (with --serve-model)")
    serve_model_args: str = field(default="", **helped(
        "more options for `lake serve-model`, e.g. '--keep-versions 3 --promote-if-better'"))
    dry_run: bool = field(default=False, **helped("print each component's command line and exit; nothing starts"))

    def __post_init__(self):
        # the components' own checks (a bad port is lake serve's error), before anything starts
        ServeConfig(host=self.host, port=self.port)
        FolderWatchConfig(skills=Path(self.skills), inbox=Path(self.inbox))
        if self.recipe not in RECIPES:  # online RL is a run of its own (lake train watch --recipe online)
            raise OptionError(f"unknown --recipe {self.recipe!r}: use {' or '.join(RECIPES)}")
        if self.serve_model:
            if self.no_train:
                raise OptionError("--serve-model serves the streaming trainer's increments: drop --no-train")
            if self.model_port == self.port:
                raise OptionError(f"--model-port {self.model_port} is the lake server's --port: pick another")
            ServeModelConfig(host=self.host, port=self.model_port)
        if self.from_run:
            if self.no_train:
                raise OptionError("--from starts the streaming trainer from a run: drop --no-train")
            RunReader.open(self.from_run, "--from").weights()  # a missing or empty run: one line now
        self.train_arg_list(), self.serve_model_arg_list()  # an unclosed quote: one line now

    def trainer_folder(self) -> Path:
        """The streaming trainer's folder, as `lake train watch` settles it from --recipe and --train-args' --name or
        --output (WatchConfig.folder)."""
        args = self.train_arg_list()
        given = {}
        for i, a in enumerate(args):
            flag, eq, value = a.partition("=")
            if flag in ("--name", "--output"):
                given[flag[2:]] = value if eq else (args[i + 1] if i + 1 < len(args) else None)
        return WatchConfig(recipe=self.recipe, model=self.model, **given).folder()

    def train_arg_list(self) -> list[str]:
        """--train-args split as a shell splits it, so a quoted value stays one argument."""
        return _split("--train-args", self.train_args)

    def serve_model_arg_list(self) -> list[str]:
        return _split("--serve-model-args", self.serve_model_args)


def _split(flag: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:  # an unclosed quote
        raise OptionError(f"{flag} {text!r}: {exc}") from None


UP_OPTIONS = [("lake_root", "--lake"), ("host", "--host"), ("port", "--port"), ("skills", "--skills"),
              ("inbox", "--inbox"), ("recipe", "--recipe"), ("model", "--model"), ("from_run", "--from"),
              ("train_args", "--train-args"),
              ("logs", "--logs"), ("no_train", "--no-train"), ("serve_model", "--serve-model"),
              ("model_port", "--model-port"), ("serve_model_args", "--serve-model-args"), ("dry_run", "--dry-run")]


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
        start = ["--from", cfg.from_run] if cfg.from_run else []
        out.append(Component("train", lake_command("train", "watch", *lake, "--recipe", cfg.recipe, "--model",
                                                   cfg.model, *start, *cfg.train_arg_list())))
    if cfg.serve_model:
        folder = cfg.trainer_folder()
        start = ["--adapter", cfg.from_run] if cfg.from_run else []
        out.append(Component("model", lake_command("serve-model", *lake, "--host", cfg.host, "--port",
                                                   str(cfg.model_port), "--model", cfg.model, *start, "--follow",
                                                   str(folder), *cfg.serve_model_arg_list())))
    return out


def _render(rows: list[dict]):
    """One line per component, cut at the terminal's width: name, state, restarts, its last output line."""
    from rich.console import Group
    from rich.text import Text

    return Group(*(Text.assemble((f"{r['name']:<6}", "bold"), f" {r['state']:<34} restarts {r['restarts']:<3} ",
                                 (r["last"], "dim"), no_wrap=True, overflow="ellipsis") for r in rows))


def up(values: dict, _as_json: bool, _quiet: bool) -> None:
    """Serve the lake, watch skills + inbox and train as data lands; Ctrl-C stops everything."""
    from rich.live import Live

    from lachesis.console import literal, new_console
    from lachesis.foreground import terminal_foreground

    from lake import Lake, resolve_root

    cfg = UpConfig(**values)
    if cfg.dry_run:  # the commands as they would start, one per line: nothing is created
        for c in components(cfg, resolve_root(cfg.lake_root)):
            print(f"{c.name}: {shlex.join(c.argv)}")
        return
    root = Lake.init(cfg.lake_root).root
    console = new_console(stderr=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sup = Supervisor(components(cfg, root), Path(cfg.logs), on_event=lambda m: console.print(literal(m), highlight=False))
    console.print(literal(f"lake {root}; logs in {cfg.logs}/; Ctrl-C stops everything"), highlight=False)
    # Ctrl-C reaches this process group alone, so `just up` stopped cleanly exits 0 (lachesis/foreground.py)
    with terminal_foreground(), Live(_render([]), console=console, refresh_per_second=2, transient=False) as live:
        sup.run(stop, lambda rows: live.update(_render(rows)))
    if sup.failed:  # a usage error is not cured by a restart: the component's own line, and its exit code
        fail(sup.failed, USAGE_ERROR)
    console.print("stopped", highlight=False)


def main() -> None:
    run(config_app("up", "Serve the lake, watch skills + inbox and train as data lands (--serve-model: and serve each "
                         "new increment over the OpenAI API); Ctrl-C stops everything.", UpConfig, UP_OPTIONS, up,
                   output_options=False), prog_name="just up")


if __name__ == "__main__":
    main()
