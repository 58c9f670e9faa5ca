"""Console scripts of the guide's strategies 2 and 3 (online RL and transfer).

`rl_edit_config KEY VALUE` sets one key of the project file lachesis.toml (found from the working
directory upward, else created here; --config PATH) and prints `KEY: old -> new (path)`;
`rl_edit_config --list [--json]` shows every key with its type, default, current value and help. The keys,
their types and ranges are trainers.project_config.ProjectConfig; an unknown key (with the closest valid
one), a wrong type or an out-of-range value is one line on stderr, exit 2, and the file stays as it was.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lachesis.console import fail, print_json, print_rows, run

_APP_KW = dict(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=False)
EDIT_HELP = "Set one key of the project config (lachesis.toml), or --list every key with its current value."

edit_config_app = typer.Typer(help=EDIT_HELP, **_APP_KW)


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
    from trainers.errors import TrainerInputError
    from trainers.project_config import describe_config, edit_config, find_config_file

    try:
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
    except TrainerInputError as exc:
        fail(str(exc), exc.exit_code)
    typer.echo(f"{key}: {old!r} -> {new!r} ({path})" if isinstance(new, str) else f"{key}: {old} -> {new} ({path})")


def rl_edit_config_main() -> None:
    run(edit_config_app, prog_name="rl_edit_config")
