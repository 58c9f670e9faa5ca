"""Every command of every console script in pyproject.toml has a first-line description and help on every
option, and a usage error is one line `error: ...`, not a boxed panel. Introspected with typer/click (no
subprocess): the app a script runs is captured by running its main with Typer.__call__ and console.run
replaced, so the check follows whatever the scripts are, including ones added later."""
from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest
import typer
import typer.main

from lachesis import console

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


class _Captured(Exception):
    def __init__(self, app: typer.Typer):
        self.app = app


def script_app(entry: str, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    """The Typer app that console script `module:function` runs (its main is stopped before parsing argv)."""
    module_name, func_name = entry.split(":")
    module = importlib.import_module(module_name)

    def capture(app: typer.Typer, *args, **kwargs):
        raise _Captured(app)

    with monkeypatch.context() as m:
        m.setattr(typer.Typer, "__call__", capture)
        m.setattr(module, "run", capture, raising=False)  # a module's own name for lachesis.console.run
        m.setattr(console, "run", capture)
        with pytest.raises(_Captured) as got:
            getattr(module, func_name)()
    return got.value.app


def commands(cmd, path: str):
    """(path, click command) for a command and, for a group, every subcommand, depth first."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from commands(sub, f"{path} {name}")


def missing_help(app: typer.Typer, name: str) -> list[str]:
    problems = []
    for path, cmd in commands(typer.main.get_command(app), name):
        first = (cmd.help or cmd.short_help or "").strip().splitlines()
        if not first or not first[0].strip():
            problems.append(f"{path}: no description")
        for p in cmd.params:
            if p.param_type_name == "option" and not (p.help or "").strip():
                problems.append(f"{path} {p.opts[0]}: no help")
    return problems


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_and_option_has_help(name, monkeypatch):
    assert missing_help(script_app(SCRIPTS[name], monkeypatch), name) == []


def test_the_check_sees_a_missing_help():
    """The introspection itself: an option without help and a command without a docstring are found."""
    app = typer.Typer(help="A probe.")

    @app.command()
    def undocumented(flag: bool = typer.Option(False, "--flag")) -> None:
        pass

    @app.command()
    def documented(flag: bool = typer.Option(False, "--flag", help="A flag.")) -> None:
        """Does a thing."""

    assert missing_help(app, "probe") == ["probe undocumented: no description", "probe undocumented --flag: no help"]


# -- usage errors: one line ------------------------------------------------------------------------------------
def run_script(entry: str, args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """Run a console script's main in-process with argv; (exit status, stdout, stderr)."""
    module_name, func_name = entry.split(":")
    main = getattr(importlib.import_module(module_name), func_name)
    monkeypatch.setattr(sys, "argv", [func_name, *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("script, args, message", [
    ("lake", ["sql", "--bogus"], "No such option: --bogus"),
    ("lake", ["sql"], "Missing argument"),
    ("lake", ["no-such-command"], "No such command"),
    ("lake", ["export", "sft", "--format"], "requires an argument"),
    ("atropos_trajectory_export", ["--output"], "requires an argument"),
    ("atropos_trajectory_export", ["--nope"], "No such option"),
])
def test_usage_error_is_one_line(script, args, message, capsys, monkeypatch):
    code, out, err = run_script(SCRIPTS[script], args, capsys, monkeypatch)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and "╭" not in err and "Usage:" not in err, err


def test_help_and_success_exit_zero(capsys, tmp_path, monkeypatch):
    code, out, _ = run_script(SCRIPTS["lake"], ["sql", "--help"], capsys, monkeypatch)
    assert code == 0 and "--as-of" in out
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "lake"))
    assert run_script(SCRIPTS["lake"], ["init"], capsys, monkeypatch)[0] == 0
    code, out, _ = run_script(SCRIPTS["lake"], ["sql", "SELECT 41 + 1 AS n", "--json"], capsys, monkeypatch)
    assert code == 0 and '"n": 42' in out
    code, _, err = run_script(SCRIPTS["lake"], ["sql", "SELECT 1", "--json", "--format", "csv"], capsys, monkeypatch)
    assert code == 2 and err.startswith("error: ") and "disagree" in err
