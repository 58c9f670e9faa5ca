"""Shared pieces of every command: the lake option, one-line errors, tables and JSON on stdout."""
from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import functools
import io
import sys
from typing import Any, Callable, NamedTuple, NoReturn, Optional

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ground.errors import UserError
from ground.options import AS_OF_HELP

try:  # typer >= 0.22 vendors click: its parser raises typer._click's exceptions, not the click package's
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on the click package
    from click import exceptions as click_errors



def new_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    """Every Rich console of the CLI. Emoji codes off: Rich would print `bash_exec_env:train:00001` with a tram
    for `:train:`. Markup stays on for our own `[bold]`; user data goes in through `literal` or `table`."""
    return Console(stderr=stderr, quiet=quiet, emoji=False)


console = new_console()
err_console = new_console(stderr=True)

LakeOption = typer.Option(None, "--lake", help="Lake root (default: $LAKE_ROOT or ./data/lake).", show_default=False)
JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")
AsOfOption = typer.Option(None, "--as-of", help=AS_OF_HELP, show_default=False)


def option(config: type, name: str, *flags: str, **kwargs: Any) -> Any:
    """A typer option whose default and help come from field `name` of a command's config dataclass.

    Every command keeps one typed config dataclass (TRL's `*_config.py` style: a help text per field, declared with
    ground.options.helped, validation in `__post_init__`); the CLI never restates a default or a help text.
    """
    fields = {f.name: f for f in dataclasses.fields(config)}
    if name not in fields:
        raise KeyError(f"{config.__name__} has no field {name!r}")
    f = fields[name]
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        default = ...
    help_text = f.metadata.get("help")
    if not help_text:
        raise KeyError(f"{config.__name__}.{name} has no help text")
    if not flags:  # no flag: a positional argument (`lake export-model RUN`)
        return typer.Argument(default, help=help_text, show_default=default is not ..., **kwargs)
    return typer.Option(default, *flags, help=help_text, **kwargs)


class Extra(NamedTuple):
    """An entry of `config_command`'s options that is no field of the config: a parameter `name` with its typer
    `default` (`typer.Option`, `typer.Argument`; none for typer's Context, annotated `typer.Context`), its value
    handed to the body in `values` under `name`, beside the fields' (`--lake` of `lake serve`, `--once` of
    `lake watch`)."""

    name: str
    annotation: Any
    default: Any = None


def config_command(config: type, options: list, body: Any, *, output_options: bool = True,
                   renamed: dict[str, str] | None = None) -> Any:
    """A typer command whose options are fields of a config dataclass, `options` in --help order, each one of:
    `(field, *flags)` (default and help from `option`; a field without flags is a positional argument), the same
    ending with a dict of more typer.Option arguments (`{"envvar": ..., "hidden": True}`; `"annotation"`: the
    option's type when it is not the field's, as a Path the body turns into the field's str), `(field, [(subfield,
    *flags), ...])` for a field that is a config dataclass of its own (its fields' options at this place, the body
    gets the built dataclass: `lake serve`'s `limits`), or an `Extra` (an option that is no field). Plus --json and
    --quiet (unless `output_options` is False: a command with no result to print). It calls `body(values, as_json,
    quiet)` with the options' values by field name; the body builds the config, whose `__post_init__` validates them.
    `renamed` = {old flag: field}: a spelling a field had before, still taken (hidden from --help); a command that
    ran with it ends with a one-line warning naming the new one (a refused command's error stays its one line).
    A `UserError` the body raises (the config's own refusal) ends as one line `error: ...` and its exit status in
    any typer app, as under `App`."""
    import inspect
    import typing

    hints = typing.get_type_hints(config)
    kw = inspect.Parameter.KEYWORD_ONLY
    params, nested, new_flag = [], {}, {}
    for entry in options:
        if isinstance(entry, Extra):
            params.append(inspect.Parameter(entry.name, kw, default=entry.default, annotation=entry.annotation))
            continue
        name, *flags = entry
        if flags and isinstance(flags[0], list):  # a config of its own: its fields' options, built into one value
            sub, sub_hints = hints[name], typing.get_type_hints(hints[name])
            nested[name] = (sub, [n for n, *_ in flags[0]])
            params += [inspect.Parameter(n, kw, default=option(sub, n, *f), annotation=sub_hints[n])
                       for n, *f in flags[0]]
            continue
        more = dict(flags.pop()) if flags and isinstance(flags[-1], dict) else {}
        annotation = more.pop("annotation", hints[name])  # the option's own type (a Path for a str field)
        if flags:
            new_flag[name] = flags[0]
        params.append(inspect.Parameter(name, kw, default=option(config, name, *flags, **more), annotation=annotation))
    params += [inspect.Parameter("as_json", kw, default=typer.Option(False, "--json", help="print the result as JSON"),
                                 annotation=bool),
               inspect.Parameter("quiet", kw, default=typer.Option(False, "--quiet", "-q", help="no progress and no table"),
                                 annotation=bool)] if output_options else []
    renamed = renamed or {}
    params += [inspect.Parameter(f"renamed_{name}", kw, annotation=Optional[hints[name]], default=typer.Option(
        None, old, hidden=True, help=f"the old spelling of {new_flag[name]}")) for old, name in renamed.items()]

    def command(as_json: bool = False, quiet: bool = False, **values: Any) -> None:
        used = []
        for old, name in renamed.items():
            value = values.pop(f"renamed_{name}")
            if value is not None:
                used.append(f"{old} is now {new_flag[name]}; the old spelling still works, for now")
                values[name] = value
        for name, (sub, names) in nested.items():
            values[name] = sub(**{n: values.pop(n) for n in names})
        body(values, as_json, quiet)
        for line in used:
            err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)

    command.__signature__ = inspect.Signature(params)  # what typer reads the options from
    # a refused value is one line whichever typer app registers the command (an App ends user errors too)
    return _ending_user_errors(command)


def print_error(message: str) -> None:
    """`error: message` on stderr, the message taken literally (a `[OPTIONS]` in it is text, not markup)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """A user-facing error: one line on stderr, no traceback."""
    print_error(message)
    raise typer.Exit(code)


class App(typer.Typer):
    """Every typer app of the CLI (`lake`, its sub-apps, each console script). Where each of its commands starts, a
    `UserError` (any wing's: ground/errors.py) ends as one line `error: ...` on stderr and the error's exit status,
    and Ctrl-C as `interrupted` (or the stopped run's own line saying how to resume it) and exit 130: caught here
    once, not in each command, and the same under `run` and typer's CliRunner."""

    def __init__(self, **kwargs: Any):
        super().__init__(**{"add_completion": False, "pretty_exceptions_enable": False, **kwargs})

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
        register = super().command(*args, **kwargs)

        def decorator(fn: Callable) -> Callable:
            register(_ending_user_errors(fn))
            return fn

        return decorator


def _ending_user_errors(fn: Callable) -> Callable:
    @functools.wraps(fn)  # typer reads the options from fn's signature, through __wrapped__
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            fail(exc.one_line(), exc.exit_code)
        except KeyboardInterrupt as exc:  # a stopped run's TrainingInterrupted says where it stopped
            fail(str(exc) or "interrupted", 130)

    return command


def config_app(name: str, help_text: str, config: type, options: list[tuple[str, ...]], body: Any,
               **kwargs: Any) -> App:
    """A console script whose one command, `name`, is `config_command(config, options, body, **kwargs)`."""
    app = App(help=help_text)
    app.command(name=name, help=help_text)(config_command(config, options, body, **kwargs))
    return app


# Options whose value may be left out: `--ray` alone is `--ray local` (a Ray cluster started for the command;
# placement/ray_cluster.py). Click has no optional values, so the value is filled in before it parses.
BARE_VALUES = {"--ray": "local"}


def fill_bare_values(args: list[str]) -> list[str]:
    """`args` with the value of each BARE_VALUES option that stands alone (last, or before another option)."""
    out: list[str] = []
    for k, arg in enumerate(args):
        out.append(arg)
        if arg in BARE_VALUES and (k + 1 == len(args) or args[k + 1].startswith("-")):
            out.append(BARE_VALUES[arg])
    return out


def run(app: typer.Typer, args: Optional[list[str]] = None, prog_name: Optional[str] = None) -> NoReturn:
    """Run a console script's app: a usage error is one line `error: ...` on stderr (exit 2) instead of typer's
    boxed rich panel, and a command's own `fail` keeps its code. Every console script's main calls this."""
    command = typer.main.get_command(app)
    args = fill_bare_values(sys.argv[1:] if args is None else list(args))
    try:
        # standalone_mode=False: click raises its errors here instead of printing them its own way
        result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:  # the help is already printed (rich) or in the message
        if exc.format_message().strip():
            exc.show()
        sys.exit(exc.exit_code)
    except click_errors.ClickException as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if isinstance(exc, click_errors.UsageError) and exc.ctx else ""
        message = " ".join(exc.format_message().split())  # one line, whatever click put in it
        print_error(message + hint)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted", highlight=False)
        sys.exit(1)
    # not standalone, main returns the code of a typer.Exit / fail (else the command's own return value: None)
    sys.exit(result if isinstance(result, int) else 0)


def _plain(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


def dumps(obj: Any) -> str:
    return orjson.dumps(obj, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def print_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj) + "\n")


def literal(value: Any) -> str:
    """A user value to put in a markup string (`f"[bold]{literal(name)}[/]"`): `list[int]` stays `list[int]`."""
    return escape(str(value))


def table(columns: list[str], rows: list[list[Any]], title: Optional[str] = None, show_header: bool = True) -> Table:
    """The one way user data reaches a Rich table: every cell and the title as plain Text, so a value prints as it
    is (`a = x[i]` is not markup, `:train:` is not an emoji); None is an empty cell."""
    t = Table(title=None if title is None else Text(title), show_header=show_header, show_lines=False)
    for c in columns:
        t.add_column(Text(c), overflow="fold")
    for r in rows:
        t.add_row(*[Text("" if v is None else str(_plain(v))) for v in r])
    return t


def print_rows(rows: list[dict[str, Any]], title: str | None = None, columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    console.print(table(columns, [[r.get(c) for c in columns] for r in rows], title=title))


def rows_to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (dumps(v) if isinstance(v, (list, dict)) else _plain(v)) for k, v in r.items()})
    return buf.getvalue()
