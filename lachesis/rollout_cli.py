"""`lake rollout`: run scripted-policy episodes (expert, noisy, recover, random) and append them to the lake.

Defaults and help come from ingest.rollout.RolloutSpec, which also validates the options."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ingest.rollout_config import RolloutSpec
from lachesis.console import LakeOption, option


def rollout(
    env: str = option(RolloutSpec, "env", "--env"),
    policy: str = option(RolloutSpec, "policy", "--policy"),
    episodes: int = option(RolloutSpec, "episodes", "--episodes"),
    split: str = option(RolloutSpec, "split", "--split"),
    seed: int = option(RolloutSpec, "seed", "--seed"),
    tasks: Optional[Path] = option(RolloutSpec, "tasks_file", "--tasks"),
    max_steps: int = option(RolloutSpec, "max_steps", "--max-steps"),
    templates: Optional[str] = typer.Option(None, "--templates",
                                            help="Only these task templates, comma-separated (default: all)."),
    screenshots: Optional[Path] = option(RolloutSpec, "screenshots", "--screenshots"),
    lake: Optional[Path] = LakeOption,
    json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of text."),
) -> None:
    """Run episodes of ENV with a scripted policy and append each one to the lake as a trajectory."""
    import envs
    from ingest.rollout import append_rollouts, iter_rollouts, summarize
    from lachesis.console import console, err_console, fail, literal, print_json
    from lake import LakeError, RecordError, resolve_root
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    spec = RolloutSpec(env=env, policy=policy, episodes=episodes, split=split, seed=seed,
                       tasks_file=str(tasks) if tasks else None, max_steps=max_steps,
                       templates=tuple(t.strip() for t in templates.split(",") if t.strip()) if templates else (),
                       screenshots=str(screenshots) if screenshots else None)
    name = envs.resolve_name(env)
    records: list[dict] = []
    progress = Progress(TextColumn(f"[bold green]{name} {policy}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("mean reward {task.fields[mean]:.2f}"), TimeElapsedColumn(),
                        console=err_console, transient=json)
    try:
        with progress:
            bar = progress.add_task("rollout", total=episodes, mean=0.0)
            for rec in iter_rollouts(spec):
                records.append(rec)
                progress.update(bar, advance=1, mean=summarize(records)["mean_reward"])
    except (FileNotFoundError, ValueError) as exc:  # envs.TaskFileError is a ValueError
        fail(str(exc))
    try:
        result = append_rollouts(records, lake)
    except (LakeError, RecordError) as exc:
        fail(f"could not append to the lake: {exc}")
    summary = {"env": name, "policy": policy, "split": split, "seed": seed, **summarize(records),
               "lake": str(resolve_root(lake)), "table": "trajectories", "version": result.version,
               "rows": result.rows}
    if json:
        print_json(summary)
    else:
        console.print(f"{summary['episodes']} {policy} episodes of {name} ({split}): mean reward "
                      f"{summary['mean_reward']:.2f}, success {summary['success_rate']:.0%}; appended "
                      f"{result.rows} rows to trajectories v{result.version} at {literal(summary['lake'])}")


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
