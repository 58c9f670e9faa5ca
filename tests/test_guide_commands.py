"""The guide's command lines, exactly as its Chinese text writes them (docs/ARCHITECTURE.md: "the guide's
spellings must work as written"), parse against our console scripts: every name is a script, every option is
accepted with the guide's values. Parsing only (click's make_context): running them is the job of each wing's
tests. Commands that do not exist yet are strict xfails, so they turn red the day they land untested here."""
from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest
import typer.main

from test_cli_help import script_app

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

# (strategy, the command line as the guide prints it)
GUIDE = [
    ("1", "atropos_trajectory_export --format=parquet --output=trajectories/"),
    ("1", "rl_finetune_supervised.py --model=hermes-3 --data=trajectories/ --epochs=3"),
    ("1", "hermes_eval --task=debug-python --split=test"),
    ("2", "rl_list_environments"),
    ("2", "rl_edit_config reward_scale 2.5"),
    ("2", "rl_train_online --steps=5000 --eval_interval=500"),
    ("3", "rl_list_environments --tag=shell"),
    ("3", "rl_transfer_init --source_env=bash_exec_env --target_env=git_repo_env --freeze_layers=0-8"),
    ("3", "rl_edit_config learning_rate 3e-5"),
    ("3", "rl_train_transfer --max_steps=2000"),
    ("4", "skill_to_instruction --min-uses 5 --output ft_prompts/"),
    ("4", "llm_finetune --model=hermes-3 --data=instruction_dataset.jsonl --method=sft"),
]
PENDING: set[str] = set()  # commands of the guide not built yet


def _cases():
    for strategy, line in GUIDE:
        name = shlex.split(line)[0]
        marks = [pytest.mark.xfail(strict=True, reason="issue 13: not built yet")] if name in PENDING else []
        yield pytest.param(line, marks=marks, id=f"{strategy}:{name}")


@pytest.mark.parametrize("line", list(_cases()))
def test_guide_command_parses_as_written(line, monkeypatch):
    name, *args = shlex.split(line)
    assert name in SCRIPTS, f"{name} is not a console script in pyproject.toml"
    command = typer.main.get_command(script_app(SCRIPTS[name], monkeypatch))
    command.make_context(name, list(args))  # raises click's UsageError on an unknown option or a bad value
    flags = {opt for p in command.params for opt in p.opts}
    given = {a.split("=")[0] for a in args if a.startswith("--")}
    assert given <= flags, f"{line}: no option {sorted(given - flags)}"


def test_a_misspelled_option_is_refused(monkeypatch):
    """The check above can fail: an option the script does not have is a usage error."""
    command = typer.main.get_command(script_app(SCRIPTS["hermes_eval"], monkeypatch))
    with pytest.raises(Exception, match="No such option"):
        command.make_context("hermes_eval", ["--taks=debug-python"])
