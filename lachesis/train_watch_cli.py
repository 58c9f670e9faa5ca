"""`lake train watch` and `lake train status`: the streaming trainer's commands (trainers/watch/loop.py).

`watch`'s options are fields of WatchConfig (default and help from there). With --json every event (ready,
training, increment, eval) is one JSON line on stdout, flushed, for supervisors, benchmarks and tests; without,
one line per increment on stderr (and one naming the served conversations it trains, when it trains any).
SIGINT/SIGTERM stop a waiting watcher at once and a training one once its increment is written; a watcher killed
harder restarts from its last complete increment. `status` prints a block per watcher that fits 80 columns,
`--wide` the table, `--json` the statuses.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from lachesis.console import App, JsonOption, LakeOption, config_command, print_json
from lachesis.train_cli import RENAMED
from trainers.watch.config import ONLINE, WatchConfig

WATCH_OPTIONS = [
    ("recipe", "--recipe"), ("view", "--view"), ("model", "--model"), ("from_run", "--from"), ("lake_root", "--lake"),
    ("name", "--name"),
    ("output", "--output"), ("min_rows", "--min-rows"), ("debounce", "--debounce"), ("poll_interval", "--poll-interval"),
    ("replay", "--replay"), ("max_versions", "--max-versions"), ("once", "--once"),
    ("max_increments", "--max-increments"), ("eval_every", "--eval-every"), ("eval_task", "--eval-task"),
    ("eval_limit", "--eval-limit"), ("keep", "--keep"), ("epochs", "--epochs"), ("max_steps", "--max-steps"),
    ("learning_rate", "--learning-rate"), ("batch_size", "--batch-size"), ("grad_accum", "--grad-accum"),
    ("max_length", "--max-length"), ("full", "--full/--lora"), ("lora_rank", "--lora-rank"), ("lora_alpha", "--lora-alpha"),
    ("target_modules", "--target-modules"), ("seed", "--seed"), ("split", "--split"), ("threads", "--threads"),
    ("device", "--device"), ("chat_template", "--chat-template"), ("actors", "--actors"),
    ("served_test_fraction", "--served-test-fraction"),
]
ONLINE_KEYS = ("run_id", "env", "steps", "rollouts", "success_before", "success_after", "reward_before", "reward_after",
               "run_dir")


def _emitter(as_json: bool, quiet: bool):
    from lachesis.console import dumps, literal, new_console

    err = new_console(stderr=True, quiet=quiet)
    err.soft_wrap = True  # one line per event: `just up` shows the last

    def emit(rec: dict) -> None:
        if as_json:
            sys.stdout.write(dumps(rec).replace("\n", "") + "\n")
            sys.stdout.flush()
            return
        kind = rec["event"]
        if kind == "ready":
            err.print(f"[bold]{literal(rec['name'])}[/]: from increment {rec['increment']}, offsets {rec['offsets']}"
                      + (f", weights of {literal(rec['from'])}" if rec.get("from") else "")
                      + (f", {rec['reconciled']} runs events recovered" if rec["reconciled"] else ""), highlight=False)
        elif kind == "increment":
            loss = f", loss {rec['final_loss']:.3f}" if rec.get("final_loss") is not None else ""
            err.print(f"increment {rec['increment']}: {rec['rows_consumed']} rows, {rec['new_examples']} new + "
                      f"{rec['replayed_examples']} replayed examples, {rec['steps']} steps{loss}, "
                      f"{rec['increment_s']:.2f} s{_left_out(rec)} -> {literal(rec['adapter'])}", highlight=False)
            if rec.get("served"):
                err.print(literal(_served(rec)), highlight=False)
        elif kind == "skipped":
            err.print(f"no increment: {rec['rows_consumed']} rows consumed, no new example{_left_out(rec)}; nothing "
                      f"published (still increment {rec['increment']})", highlight=False)
        elif kind == "online":
            err.print(f"online: {rec['steps']} steps on {rec['rollouts']} rollouts, success {rec['success_before']} -> "
                      f"{rec['success_after']} -> {literal(rec['run_dir'])}", highlight=False)
        elif kind == "warning":  # a broken checkpoint or file met at start, a rewind: one line each, never silent
            err.print(f"[yellow]warning:[/] {literal(rec['message'])}", highlight=False)
        elif kind == "nothing_new":
            err.print(literal(rec["message"]), highlight=False)
        elif kind == "eval":
            err.print(f"eval after increment {rec['increment']}: success {rec['success_rate']:.3f}, "
                      f"mean reward {rec['mean_reward']:.3f}", highlight=False)

    return emit


SERVED_SHOWN = 5  # served conversations named in the line; the rest are counted


def _served(rec: dict) -> str:
    """'increment 3 trains 2 served conversations now trainable: 6f1c... (reward 1.0), 93ab... (reward 0.8)': a
    served conversation's reward usually lands after it, and this is where the wait for it ends."""
    served = rec["served"]
    named = ", ".join(f"{s['trajectory_id']} (reward {s['reward']})" for s in served[:SERVED_SHOWN])
    more = f" and {len(served) - SERVED_SHOWN} more" if len(served) > SERVED_SHOWN else ""
    return (f"increment {rec['increment']} trains {len(served)} served conversation{'s' * (len(served) != 1)} "
            f"now trainable: {named}{more}")


def _left_out(rec: dict) -> str:
    """', left out: over_max_length 3, other_split 1; cut 2': the rows an increment did not train on, by reason."""
    out = ", ".join(f"{k} {v}" for k, v in sorted(rec.get("left_out", {}).items()))
    cut = f"cut to --max-length {rec['truncated_rows']}" if rec.get("truncated_rows") else ""
    return "".join(f", {x}" for x in (f"left out: {out}" if out else "", cut) if x)


def _watch(values: dict, as_json: bool, quiet: bool) -> None:
    import signal
    import threading

    cfg = WatchConfig(**values, progress=False)
    if cfg.recipe == ONLINE:
        _online(cfg, as_json, quiet)
        return
    from trainers.watch.loop import StreamTrainer

    stop = threading.Event()
    # the caller's handlers come back afterwards: the command also runs inside other processes (tests, `just up`)
    before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        trainer = StreamTrainer(cfg, emit=_emitter(as_json, quiet))
        try:
            trained = trainer.run(stop)
        finally:
            trainer.close()
        if cfg.once and not trained and not trainer.skipped:  # say it: a silent exit reads as "it did not run"
            emit = _emitter(as_json, quiet)
            emit({"event": "nothing_new", "min_rows": cfg.min_rows, "split": cfg.split,
                  "message": f"nothing new: fewer than --min-rows {cfg.min_rows} new rows of the {cfg.split} split "
                             "since the last increment"})
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _online(cfg: WatchConfig, as_json: bool, quiet: bool) -> None:
    """The online recipe: rl_train_online --actors N's one loop (trainers/rl/learner.py), its summary as one event."""
    from dataclasses import replace

    from lachesis.console import new_console
    from trainers.rl.learner import train_online

    online = replace(cfg.online_config(), progress=not (quiet or as_json))
    summary = train_online(online, new_console(stderr=True, quiet=quiet or as_json))
    _emitter(as_json, quiet)({"event": "online", **{k: summary.get(k) for k in ONLINE_KEYS}})


def status(
    runs: Path = typer.Option(Path("runs"), "--runs", help="Folder of watcher folders (runs/<name>), or one watcher's."),
    lake: Optional[Path] = LakeOption,
    json: bool = JsonOption,
    wide: bool = typer.Option(False, "--wide", help="One table row per watcher, as wide as its cells (the default "
                                                    "prints a block per watcher that fits 80 columns)."),
) -> None:
    """Each streaming trainer: offsets, lag in versions and rows, last increment, adapters produced, alive."""
    from lachesis import console as out  # its console at call time (tests render into an 80-column one)
    from lake import open_lake
    from trainers.watch.status import find_watchers, watcher_status

    lk = open_lake(lake) if lake is not None else None
    found = [watcher_status(f, lk) for f in find_watchers(runs)]
    if json:
        print_json(found)
        return
    if not found:
        print(f"no watchers under {runs} (start one with `lake train watch`)", file=sys.stderr)
        return
    rows = []
    for w in found:
        for line in w["broken"]:  # the table has no room for why: one line each
            print(f"warning: {w['name']}: {line}", file=sys.stderr)
        last = w["last_increment"] or {}
        lag = {t: f"{v} v / {w['lag_rows'][t]} rows" for t, v in w["lag_versions"].items()} if "lag_rows" in w else None
        skipped = w.get("skipped")
        rows.append({"name": w["name"], "alive": f"pid {w['pid']}" if w["alive"] else "no", "phase": w["phase"],
                     "offsets": _kv(w["offsets"]), "lag": _kv(lag) if lag else w.get("error", "-"),
                     "increments": w["increments"],
                     "last": (f"#{last['increment']}: {last['rows']} rows, {last['steps']} steps{_left_out(last)}"
                              if last else "-"),
                     "since": (f"{skipped['rows_consumed']} rows, no example{_left_out(skipped)}" if skipped else "-")})
    if wide:
        _print_wide(out.console, rows, "streaming trainers")
    else:
        out.console.print(_blocks(rows, "streaming trainers"))


BLOCK_FIELDS = ("increments", "offsets", "lag", "last", "since")


def _blocks(rows: list[dict], title: str):
    """`lake train status` by default: per watcher a header line (name, alive, phase) and one field a line below it,
    the values wrapped at word boundaries in the width the terminal leaves. Fits 80 columns: the eight-column table
    (--wide) gave each cell under ten columns there and cut every value into pieces."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts: list = [Text(title, style="bold")]
    for r in rows:
        alive = "not alive" if r["alive"] == "no" else f"alive ({r['alive']})"
        parts.append(Text.assemble((str(r["name"]), "bold"), f": {alive}, {r['phase'] or 'no heartbeat'}"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")  # words wrap; only a word wider than the column (a long path) is folded
        for key in BLOCK_FIELDS:
            grid.add_row(key, Text(str(r[key])))
        parts.append(Padding(grid, (0, 0, 1, 2)))
    return Group(*parts)


def _print_wide(console, rows: list[dict], title: str) -> None:
    """The full table, one row per watcher, printed as wide as its widest cells (a wider terminal, `less -S`, a
    file): at the terminal's width Rich would fold every cell again."""
    from rich.console import Console
    from rich.measure import Measurement

    from lachesis.console import table

    columns = list(rows[0])
    t = table(columns, [[r.get(c) for c in columns] for r in rows], title=title)
    need = Measurement.get(console, console.options.update_width(1 << 16), t).maximum
    if need > console.width:
        console = Console(file=console.file, width=need, emoji=False, no_color=console.no_color)
    console.print(t)


def _kv(d: dict | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) if d else "-"


def register(app: typer.Typer) -> None:
    train = App(help="The streaming trainer: train as lake versions land (watch), and where it stands (status).",
                no_args_is_help=True)
    train.command("watch", help="A resident trainer: one increment (versioned adapter + offsets, atomically) per "
                                "batch of new rows of the view's tables.")(
        config_command(WatchConfig, WATCH_OPTIONS, _watch, renamed=RENAMED))
    train.command("status")(status)
    app.add_typer(train, name="train")
