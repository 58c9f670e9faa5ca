"""`lake samples skills DIR`: the shipped sample skills unpacked, ready for strategy 4 or for `lake watch --skills`.

The package carries Hermes Agent 0.19.0's 177 SKILL.md files (ingest/samples.py). Laid out as Hermes installs
them they are all bundled or hub skills without usage counts, which the guide's skill_to_instruction filter
(agent-created, used at least 5 times) rightly skips; by default this command lays them out as an agent's own
skills with a sample `.usage.json`, so `skill_to_instruction --skills DIR` has something to select, plus the
project's own 2 web-form skills (ingest/data/skills) for web_form_env.
"""
from __future__ import annotations

from pathlib import Path

import typer

from lachesis.console import App, JsonOption, console, fail, literal, print_json

samples_app = App(help="Unpack the sample data shipped with the package.", no_args_is_help=True)


@samples_app.command("skills")
def skills(
    dest: Path = typer.Argument(..., help="Folder to unpack into (new or empty)."),
    as_installed: bool = typer.Option(
        False, "--as-installed",
        help="Lay them out as Hermes installs them (.bundled_manifest, .hub/lock.json, no .usage.json): bundled and "
             "hub skills, which skill_to_instruction's default filter skips. Default: as the agent's own skills, "
             "with sample use counts (0-14, marked \"sample\": true in .usage.json)."),
    json: bool = JsonOption,
) -> None:
    """Unpack the 177 sample SKILL.md files (Hermes Agent 0.19.0, MIT) into DEST, with 2 web-form skills of ours
    unless --as-installed."""
    from ingest.samples import agent_skills_tree, sample_skills_tree

    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        fail(f"{dest} exists and is not an empty folder: give a new one")
    root = (sample_skills_tree if as_installed else agent_skills_tree)(dest)
    n = sum(1 for _ in root.rglob("SKILL.md"))
    info = {"skills": n, "folder": str(root), "layout": "installed" if as_installed else "agent"}
    if json:
        print_json(info)
        return
    console.print(literal(f"unpacked {n} sample skills into {root} "
                          + ("as Hermes installs them (bundled and hub)" if as_installed
                             else "as the agent's own, with sample use counts in .usage.json")), highlight=False)
    console.print(literal(f"next: skill_to_instruction --skills {root}   (or lake watch --skills {root})"),
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(samples_app, name="samples")
