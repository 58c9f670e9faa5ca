"""`lake export`, `lake views` and `atropos_trajectory_export` generate their options from their config dataclasses
(views/export_config.py) as every other command does: --help lists each field's option with the field's help, and
a bad value is one line `error: ...` naming the option, before the lake is opened or anything is written."""
from __future__ import annotations

import dataclasses

import pytest
import typer.main

from lachesis import console, views_cli
from views.export_config import AtroposExportConfig, ExportConfig, ViewsConfig

COMMANDS = {"export": ExportConfig, "views": ViewsConfig, "atropos_trajectory_export": AtroposExportConfig}


def app_of(name: str) -> tuple[typer.Typer, list[str]]:
    """The app that runs command `name` and the arguments that pick it (the console script has just the one)."""
    if name == "atropos_trajectory_export":
        return views_cli._atropos_app, []
    app = console.App()  # as lachesis/cli.py builds `lake`
    views_cli.register(app)
    return app, [name]


def run(name: str, args: list[str], capsys) -> tuple[int, str, str]:
    """The command run as its console script runs it (lachesis.console.run): (exit status, stdout, stderr)."""
    app, prefix = app_of(name)
    with pytest.raises(SystemExit) as exc:
        console.run(app, prefix + args, prog_name=name)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_lists_every_option_with_its_fields_help(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(name, ["--help"], capsys)
    assert code == 0
    app, prefix = app_of(name)
    cmd = typer.main.get_command(app)
    cmd = cmd.commands[prefix[0]] if prefix else cmd
    params = {p.name: p for p in cmd.params}
    for f in dataclasses.fields(COMMANDS[name]):
        if not f.init:
            continue
        p = params[f.name]
        assert p.help == f.metadata["help"], f.name
        shown = p.opts[0] if p.param_type_name == "option" else f.name
        assert shown in out, (shown, out)
    for p in cmd.params:  # the fields' options and the command's own (--lake, --json)
        assert p.help and p.help.strip(), p.name
        assert p.param_type_name != "option" or p.opts[0] in out, p.opts


@pytest.mark.parametrize("name, args, option", [
    ("export", ["sft", "--output", "{tmp}/out", "--format", "csv"], "--format"),
    ("export", ["sft", "--output", "{tmp}/out", "--set", "no-equals-sign"], "--set"),
    ("views", ["--counts=maybe"], "--counts"),
    ("atropos_trajectory_export", ["--output", "{tmp}/out", "--min-interactions", "-1"], "--min-interactions"),
])
def test_a_bad_value_is_one_line_naming_the_option(name, args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "no_lake"))
    code, out, err = run(name, [a.format(tmp=tmp_path) for a in args], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and option in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "no_lake").exists()
