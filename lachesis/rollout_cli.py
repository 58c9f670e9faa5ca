"""`lake rollout`: run scripted-policy episodes (expert, noisy, recover, random) and append them to the lake.

Defaults and help come from ingest.rollout_config.RolloutSpec, which also validates the options; the options are
generated from its fields (lachesis/console.py `config_command`)."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional

import typer

from ingest.rollout_config import RolloutSpec
from lachesis.console import Extra, LakeOption, config_command


ROLLOUT_OPTIONS = [
    ("env", "--env"), ("policy", "--policy"), ("episodes", "--episodes"), ("split", "--split"), ("seed", "--seed"),
    ("tasks_file", "--tasks", {"annotation": Optional[Path]}), ("max_steps", "--max-steps"),
    Extra("templates", Optional[str], typer.Option(None, "--templates",
                                                   help="Only these task templates, comma-separated (default: all).")),
    ("workers", "--workers"), ("commit_every", "--commit-every"), ("resume", "--resume"),
    ("screenshots", "--screenshots", {"annotation": Optional[Path]}), ("ray", "--ray"),
    Extra("lake", Optional[Path], LakeOption),
    Extra("json", bool, typer.Option(False, "--json", help="Print a JSON summary instead of text.")),
]


def rollout(values: dict, as_json: bool, quiet: bool) -> None:
    """Run episodes of ENV with a scripted policy and append them to the lake as trajectories as they finish
    (a killed run keeps what it committed; --resume continues it)."""
    import envs
    from ingest.rollout import run_rollout
    from lachesis.console import console, err_console, fail, literal, print_json
    from lake import LakeError, RecordError, resolve_root
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    lake, json, templates = values.pop("lake"), values.pop("json"), values.pop("templates")
    spec = RolloutSpec(**{**values, "tasks_file": str(values["tasks_file"]) if values["tasks_file"] else None,
                          "screenshots": str(values["screenshots"]) if values["screenshots"] else None,
                          "templates": tuple(t.strip() for t in templates.split(",") if t.strip()) if templates else ()})
    env, policy, episodes, split, seed = spec.env, spec.policy, spec.episodes, spec.split, spec.seed
    name = envs.resolve_name(env)
    progress = Progress(TextColumn(f"[bold green]{name} {policy}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("success {task.fields[ok]:.0%}, lost {task.fields[lost]}"), TimeElapsedColumn(),
                        console=err_console, transient=json)
    seen = {"n": 0, "ok": 0, "lost": 0}

    def advance(_i, rec) -> None:
        seen["n"] += 1
        if isinstance(rec, dict):
            seen["ok"] += bool(rec["success"])
        else:
            seen["lost"] += 1
            err_console.print(f"episode {_i} lost: {rec}", highlight=False, markup=False)
        progress.update(bar, advance=1, ok=seen["ok"] / seen["n"], lost=seen["lost"])

    try:
        with progress:
            bar = progress.add_task("rollout", total=episodes, ok=0.0, lost=0)
            result = run_rollout(spec, lake, on_episode=advance)
            progress.update(bar, completed=result.resumed + result.played)
    except (FileNotFoundError, ValueError) as exc:  # envs.TaskFileError is a ValueError
        fail(str(exc))
    except (LakeError, RecordError) as exc:
        fail(f"could not append to the lake: {exc}")
    recorded = result.recorded
    summary = {"env": name, "policy": policy, "split": split, "seed": seed, "group_id": result.group_id,
               "episodes": recorded, "resumed": result.resumed, "played": result.played, "lost": result.lost,
               "mean_reward": result.mean_reward, "success_rate": result.successes / recorded if recorded else 0.0,
               "lake": str(resolve_root(lake)), "table": "trajectories", "version": result.version,
               "rows": result.written, "commits": result.commits}
    if json:
        print_json(summary)
    else:
        head = f"{result.resumed} episodes were in the lake already; " if spec.resume else ""
        lost = f", {len(result.lost)} lost (every try failed in the environment)" if result.lost else ""
        console.print(f"{head}{recorded} {policy} episodes of {name} ({split}): mean reward "
                      f"{summary['mean_reward']:.2f}, success {summary['success_rate']:.0%}{lost}; appended "
                      f"{result.written} rows in {result.commits} commits to trajectories v{result.version} at "
                      f"{literal(summary['lake'])}")


def register(app: typer.Typer) -> None:
    app.command("rollout", help=inspect.getdoc(rollout))(config_command(RolloutSpec, ROLLOUT_OPTIONS, rollout,
                                                                         output_options=False))
