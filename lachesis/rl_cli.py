"""Console scripts of the guide's strategies 2 and 3 (online RL and transfer).

`rl_edit_config KEY VALUE` sets one key of the project file lachesis.toml (found from the working
directory upward, else created here; --config PATH) and prints `KEY: old -> new (path)`;
`rl_edit_config --list [--json]` shows every key with its type, default, current value and help. The keys,
their types and ranges are trainers.rl.project_config.ProjectConfig; an unknown key (with the closest valid
one), a wrong type or an out-of-range value is one line on stderr, exit 2, and the file stays as it was.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lachesis.console import App, config_app, fail, print_json, print_rows, run

EDIT_HELP = "Set one key of the project config (lachesis.toml), or --list every key with its current value."

edit_config_app = App(help=EDIT_HELP)


# ignore_unknown_options: a negative value (`rl_edit_config seed -1`) is the VALUE, not an option
@edit_config_app.command(name="rl_edit_config", help=EDIT_HELP, context_settings={"ignore_unknown_options": True})
def rl_edit_config(
    key: Optional[str] = typer.Argument(None, help="the key, e.g. reward_scale (KEY=VALUE works too)",
                                        show_default=False),
    value: Optional[str] = typer.Argument(None, help="the new value, e.g. 2.5", show_default=False),
    list_keys: bool = typer.Option(False, "--list", help="show every key: type, default, current value, help"),
    as_json: bool = typer.Option(False, "--json", help="with --list: print JSON instead of a table"),
    config: Optional[Path] = typer.Option(None, "--config", help="the project file (default: lachesis.toml "
                                          "in this folder or the nearest one above, else ./lachesis.toml)",
                                          show_default=False),
) -> None:
    """Set one key of the project config (lachesis.toml), or --list every key with its current value."""
    from trainers.rl.project_config import describe_config, edit_config, find_config_file

    if list_keys:
        if key is not None:
            fail("--list takes no KEY or VALUE")
        path = config if config is not None else find_config_file()
        rows = describe_config(path)
        if as_json:
            print_json({"path": str(path) if path else None, "keys": rows})
        else:
            print_rows(rows, title=f"{path or 'no lachesis.toml found: defaults'}",
                       columns=["key", "type", "default", "current", "help"])
        return
    if key is not None and value is None and "=" in key:
        key, value = key.split("=", 1)
    if key is None or value is None:
        fail("give KEY VALUE (e.g. rl_edit_config reward_scale 2.5) or --list")
    old, new, path = edit_config(key, value, config)
    typer.echo(f"{key}: {old!r} -> {new!r} ({path})" if isinstance(new, str) else f"{key}: {old} -> {new} ({path})")


def rl_edit_config_main() -> None:
    run(edit_config_app, prog_name="rl_edit_config")


# ----------------------------------------------------------------------------------------------- online RL, transfer
# Options are fields of trainers/rl/config.py's dataclasses (default and help from there); the guide writes
# `--eval_interval=500`, `--source_env=...`, `--max_steps=2000`: every multi-word option takes both spellings.
def _both(name: str, *extra: str) -> tuple[str, ...]:
    dashed = "--" + name.replace("_", "-")
    return (name, dashed, *({"--" + name} - {dashed}), *extra)


ONLINE_OPTIONS = [
    ("env", "--env"), ("steps", "--steps"), _both("eval_interval"), ("model", "--model"), ("init", "--init"),
    ("config", "--config"), ("tasks_file", "--tasks"), ("output", "--output"), ("resume", "--resume"),
    ("lake_root", "--lake"), ("seed", "--seed"), _both("micro_batch"), _both("max_context"), ("actors", "--actors"),
    ("ray", "--ray"), _both("gradient_checkpointing"), ("threads", "--threads"),
    ("device", "--device"), ("bf16", "--bf16"), _both("tis_cap"), ("report_to", "--report-to", "--report_to"),
    ("plot", "--plot/--no-plot"), ("curriculum", "--curriculum/--no-curriculum"), _both("curriculum_floor"),
    _both("curriculum_decay"), _both("curriculum_prior"),
    ("drop_zero_variance", "--drop-zero-variance/--keep-zero-variance"),
]
TRANSFER_INIT_OPTIONS = [
    _both("source_env"), _both("target_env"), _both("freeze_layers"), ("from_run", "--from"), ("adapter", "--adapter"),
    ("config", "--config"), ("lake_root", "--lake"), ("output", "--output"),
]
TRANSFER_TRAIN_OPTIONS = [
    _both("max_steps"), ("method", "--method"), ("spec", "--spec"), _both("eval_interval"), ("data", "--data"),
    _both("batch_size"), _both("micro_batch"), _both("gradient_checkpointing"), ("config", "--config"), ("lake_root", "--lake"), ("output", "--output"),
    ("resume", "--resume"), ("seed", "--seed"), ("actors", "--actors"), ("threads", "--threads"), ("device", "--device"),
    ("report_to", "--report-to", "--report_to"), ("plot", "--plot/--no-plot"),
]


def _stderr_console(quiet: bool):
    from lachesis.console import new_console

    return new_console(stderr=True, quiet=quiet)


def _report(summary: dict, as_json: bool, keys: tuple[str, ...]) -> None:
    if as_json:
        print_json(summary)
        return
    print_rows([{"key": k, "value": summary.get(k)} for k in keys if k in summary], title=summary.get("run_id"),
               columns=["key", "value"])


RUN_KEYS = ("env", "steps", "rollouts", "success_before", "success_after", "reward_before", "reward_after",
            "valid_calls_before", "valid_calls_after", "rollouts_per_s", "train_tokens_per_s", "frozen_identical",
            "frozen_tensors", "trained_changed", "final_loss", "run_dir", "eval_curve", "loss_plot")


def _online(values: dict, as_json: bool, quiet: bool) -> None:
    from trainers.rl.learner import train_online
    from trainers.rl.config import OnlineConfig

    cfg = OnlineConfig(**values, progress=not (quiet or as_json))
    _report(train_online(cfg, _stderr_console(quiet or as_json)), as_json, RUN_KEYS)


def _transfer_init(values: dict, as_json: bool, quiet: bool) -> None:
    from trainers.transfer.config import TransferInitConfig
    from trainers.transfer.transfer import run_transfer_init

    spec = run_transfer_init(TransferInitConfig(**values))
    if as_json:
        print_json(spec)
        return
    fresh = f"; a new adapter over the merged source {spec['merged_model']}" if spec["merged_model"] else ""
    typer.echo(f"transfer spec {spec['spec_id']}: {spec['source_env']} -> {spec['target_env']} from run "
               f"{spec['source_run_id']} ({spec['model']}, {spec['mode']}, {spec['depth']} layers); frozen: embeddings "
               f"+ layers {spec['freeze_spec'] or '(none)'}{fresh}; written to {spec['spec_path']} and the lake's runs "
               f"(kind transfer_spec); next: rl_train_transfer")


def _transfer_train(values: dict, as_json: bool, quiet: bool) -> None:
    from trainers.transfer.config import TransferTrainConfig
    from trainers.transfer.transfer import run_train_transfer

    cfg = TransferTrainConfig(**values, progress=not (quiet or as_json))
    _report(run_train_transfer(cfg, _stderr_console(quiet or as_json)), as_json, RUN_KEYS)


ONLINE_HELP = ("Online RL (GRPO-style) through an environment: groups of multi-turn rollouts per task, every rollout "
               "and evaluation in the lake, checkpoints, --resume.")
TRANSFER_INIT_HELP = ("Find the latest run trained on --source_env, check --freeze_layers against its model's depth "
                      "and write a transfer spec for rl_train_transfer.")
TRANSFER_TRAIN_HELP = ("Train the target environment of the latest transfer spec from its source run, embeddings and "
                       "the frozen layers unchanged (online RL, or --method sft).")


def rl_train_online_main() -> None:
    from trainers.rl.config import OnlineConfig

    run(config_app("rl_train_online", ONLINE_HELP, OnlineConfig, ONLINE_OPTIONS, _online), prog_name="rl_train_online")


def rl_transfer_init_main() -> None:
    from trainers.transfer.config import TransferInitConfig

    run(config_app("rl_transfer_init", TRANSFER_INIT_HELP, TransferInitConfig, TRANSFER_INIT_OPTIONS, _transfer_init),
        prog_name="rl_transfer_init")


def rl_train_transfer_main() -> None:
    from trainers.transfer.config import TransferTrainConfig

    run(config_app("rl_train_transfer", TRANSFER_TRAIN_HELP, TransferTrainConfig, TRANSFER_TRAIN_OPTIONS,
                    _transfer_train), prog_name="rl_train_transfer")
