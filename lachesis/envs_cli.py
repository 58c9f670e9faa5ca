"""`rl_list_environments [--tag TAG] [--json]`: the registered environments with tags, aliases and task counts."""
from __future__ import annotations

from typing import Optional

import typer

from lachesis.console import App

app = App(help="List the registered RL environments (name, tags, aliases, train/test task counts, description).")


@app.command()
def list_environments(
    tag: Optional[str] = typer.Option(None, "--tag", help="Only environments with this tag (e.g. shell, python)."),
    json: bool = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table."),
) -> None:
    """List the registered RL environments (name, tags, aliases, train/test task counts, description)."""
    import envs
    from lachesis.console import console, print_json

    rows = envs.list_environments(tag=tag)  # an unknown tag: envs.UnknownTagError, one line naming the tags
    if json:
        print_json(rows)
        return
    from lachesis.console import table

    rows = [[r["name"], ", ".join(r["tags"]), ", ".join(r["aliases"]), r["tasks"].get("train", 0),
             r["tasks"].get("test", 0), r["tasks"].get("test_families", 0), r["description"]] for r in rows]
    console.print(table(["name", "tags", "aliases", "train", "test", "test_families", "description"], rows,
                        title="environments" + (f" tagged {tag}" if tag else "")))


def rl_list_environments_main() -> None:
    from lachesis.console import run

    run(app, prog_name="rl_list_environments")
