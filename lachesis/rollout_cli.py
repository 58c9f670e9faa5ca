"""`lake rollout`: run scripted-policy episodes (expert, noisy, random) and append them to the lake."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def rollout(
    env: str = typer.Option(..., "--env", help="Environment name (see rl_list_environments)."),
    policy: str = typer.Option("expert", "--policy", help="expert, noisy or random."),
    episodes: int = typer.Option(10, "--episodes", min=1, help="Number of episodes."),
    split: str = typer.Option("train", "--split", help="train or test."),
    seed: int = typer.Option(0, "--seed", help="First task index and policy seed (episode i uses seed+i)."),
    tasks: Optional[Path] = typer.Option(None, "--tasks", help="Your own tasks (JSONL) instead of the built-in suite."),
    max_steps: int = typer.Option(6, "--max-steps", min=1, help="Steps before an episode is cut off."),
    templates: Optional[str] = typer.Option(None, "--templates", help="Only these task templates, comma-separated."),
    lake: Optional[Path] = typer.Option(None, "--lake", help="Lake root (default: $LAKE_ROOT or ./data/lake).",
                                        show_default=False),
    json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of text."),
) -> None:
    """Run episodes of ENV with a scripted policy and append each one to the lake as a trajectory."""
    import envs
    from ingest.rollout import RolloutSpec, append_rollouts, iter_rollouts, summarize
    from lachesis.console import console, err_console, fail, print_json
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if policy not in ("expert", "noisy", "random"):
        fail(f"unknown policy {policy!r}; policies: expert, noisy, random")
    if split not in ("train", "test"):
        fail(f"unknown split {split!r}; splits: train, test")
    try:
        envs.env_info(env)
    except envs.UnknownEnvironmentError as exc:
        fail(str(exc))
    spec = RolloutSpec(env=env, policy=policy, episodes=episodes, split=split, seed=seed,
                       tasks_file=str(tasks) if tasks else None, max_steps=max_steps,
                       templates=tuple(t.strip() for t in templates.split(",") if t.strip()) if templates else ())
    records: list[dict] = []
    progress = Progress(TextColumn(f"[bold green]{env} {policy}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("mean reward {task.fields[mean]:.2f}"), TimeElapsedColumn(),
                        console=err_console, transient=json)
    try:
        with progress:
            bar = progress.add_task("rollout", total=episodes, mean=0.0)
            for rec in iter_rollouts(spec):
                records.append(rec)
                progress.update(bar, advance=1, mean=summarize(records)["mean_reward"])
    except envs.TaskFileError as exc:
        fail(str(exc))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    from lake import LakeError, RecordError, resolve_root

    try:
        result = append_rollouts(records, lake)
    except (LakeError, RecordError) as exc:
        fail(f"could not append to the lake: {exc}")
    summary = {"env": env, "policy": policy, "split": split, "seed": seed, **summarize(records),
               "lake": str(resolve_root(lake)), "table": "trajectories", "version": result.version,
               "rows": result.rows}
    if json:
        print_json(summary)
    else:
        console.print(f"{summary['episodes']} {policy} episodes of {env} ({split}): mean reward "
                      f"{summary['mean_reward']:.2f}, success {summary['success_rate']:.0%}; appended "
                      f"{result.rows} rows to trajectories v{result.version} at {summary['lake']}")


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
