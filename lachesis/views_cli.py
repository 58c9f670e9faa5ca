"""Commands of the views wing: `lake export`, `lake views`, and the guide's `atropos_trajectory_export` and
`skill_to_instruction` console scripts.

Heavy imports (duckdb, pyarrow, the modules that run views) happen inside the command bodies; the options'
defaults and help come from views.instruction_config, which imports nothing heavy.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import List, Optional

import typer

from lachesis.console import (App, AsOfOption, Extra, JsonOption, LakeOption, config_command, console, err_console,
                              fail, literal, print_json, print_rows, run)
from views.instruction_config import TRY_SAMPLES, SkillToInstructionConfig

# The guide's minimum for strategy 1: fine-tune on at least 50 complete interactions.
GUIDE_MIN_INTERACTIONS = 50

FormatOption = typer.Option("parquet", "--format", help="parquet, jsonl, or hf: a Hugging Face datasets folder "
                            "(save_to_disk) with a dataset card, for datasets.load_from_disk.")
LicenseOption = typer.Option(None, "--license", help="License id for the hf dataset card (default: unknown), e.g. "
                             "mit, cc-by-4.0.", show_default=False)
PushOption = typer.Option(None, "--push-to-hub", metavar="REPO",
                          help="With --format hf: also publish the folder to this Hub dataset repo (user/name) "
                               "with datasets' push_to_hub; needs network and a token (hf auth login).",
                          show_default=False)
WhereOption = typer.Option(None, "--where", help="SQL condition on the view's columns, e.g. \"env = 'bash_exec'\".",
                           show_default=False)
OverwriteOption = typer.Option(False, "--overwrite", help="Replace the dataset in a non-empty output folder.")
AllowEmptyOption = typer.Option(False, "--allow-empty",
                                help="Write a dataset of 0 rows instead of failing when the view is empty.")
SetOption = typer.Option(
    None, "--set",
    help="View parameter NAME=VALUE (repeatable), e.g. sft_min_reward=0.8, sft_test_fraction=0.2, dpo_min_gap=0.3.",
    show_default=False)


def _variables(items: Optional[List[str]]) -> dict:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            fail(f"--set takes NAME=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def _export(lake: Optional[Path], view: str, output: Path, fmt: str, as_of: Optional[str], where: Optional[str],
            overwrite: bool, allow_empty: bool, sets: Optional[List[str]], license: Optional[str],
            push_to_hub: Optional[str]) -> dict:
    """Run one export (and the Hub push); returns its manifest, or fails with one line."""
    from lake import open_lake
    from views.export import FORMATS, export_view

    if fmt not in FORMATS:
        fail(f"unknown format {fmt!r}; use {' or '.join(FORMATS)}")
    if fmt != "hf" and (license or push_to_hub):
        fail("--license and --push-to-hub go with --format hf")
    lk = open_lake(lake)
    given = dict(as_of=as_of, where=where, overwrite=overwrite, variables=_variables(sets), allow_empty=allow_empty)
    if fmt != "hf":
        return export_view(lk, view, output, format=fmt, **given)
    from views.export_hf import export_view_hf, push_to_hub as push  # datasets: a slow import, for this format only

    manifest = export_view_hf(lk, view, output, license=license, **given)
    if push_to_hub:
        push(output, push_to_hub)
    return manifest


def _print_export(manifest: dict, view: str, output: Path, as_json: bool, extra: Optional[dict] = None) -> None:
    if as_json:
        print_json({"output": str(output), **manifest, **(extra or {})})
        return
    splits = manifest.get("splits")
    split_text = f" ({', '.join(f'{k} {v}' for k, v in splits.items())})" if splits else ""
    versions = ", ".join(f"{t}@{v}" for t, v in manifest["lake_versions"].items())
    console.print(f"exported [bold]{manifest['row_count']}[/] rows of view [bold]{literal(view)}[/]{literal(split_text)} "
                  f"to {literal(output)} as {manifest['format']} ({len(manifest['files'])} files)", highlight=False)
    console.print(literal(f"lake versions: {versions}; event ids sha256 {manifest['event_ids_sha256'][:16]}"),
                  highlight=False)


def export(
    view: str = typer.Argument(..., help="View to export (see `lake views`), e.g. sft, dpo, replay, instruction."),
    output: Path = typer.Option(..., "--output", "-o", help="Dataset folder to write (new or empty)."),
    fmt: str = FormatOption,
    as_of: Optional[str] = AsOfOption,
    where: Optional[str] = WhereOption,
    overwrite: bool = OverwriteOption,
    allow_empty: bool = AllowEmptyOption,
    sets: Optional[List[str]] = SetOption,
    license: Optional[str] = LicenseOption,
    push_to_hub: Optional[str] = PushOption,
    lake: Optional[Path] = LakeOption,
    json: bool = JsonOption,
) -> None:
    """Write a view on a pinned lake version as a dataset folder (parquet/jsonl + manifest.json, or a Hugging Face
    datasets folder with a dataset card)."""
    manifest = _export(lake, view, output, fmt, as_of, where, overwrite, allow_empty, sets, license, push_to_hub)
    _print_export(manifest, view, output, json)


def views(lake: Optional[Path] = LakeOption,
          counts: bool = typer.Option(False, "--counts", help="Also count each view's rows (runs every view)."),
          json: bool = JsonOption) -> None:
    """List the dataset views and the helper views they use (with --counts, their rows on the latest snapshot)."""
    import duckdb

    from lake import open_lake
    from lake.query import ident
    from views import HELPER_VIEWS, list_views, view_description

    lk = open_lake(lake)
    snap = lk.snapshot()
    try:
        rows = []
        for name in list_views(lk.views_dir):
            err = snap.view_errors.get(name)
            count = None
            if err is None and counts:
                try:
                    count = snap.sql(f"SELECT count(*) FROM {ident(name)}").fetchall()[0][0]
                except duckdb.Error as exc:  # a view that fails on this lake's data: show why
                    err = str(exc).splitlines()[0]
            row = {"view": name, "kind": "helper" if name in HELPER_VIEWS else "dataset"}
            if counts:
                row["rows"] = count
            row["description"] = err or view_description(name, lk.views_dir)
            rows.append(row)
    finally:
        snap.close()
    print_json(rows) if json else print_rows(rows, title=f"views on lake {lk.root}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("views")(views)


# -- atropos_trajectory_export ----------------------------------------------------------------------------------
_atropos_app = App()


@_atropos_app.command()
def atropos_trajectory_export(
    output: Path = typer.Option(..., "--output", "-o", help="Dataset folder, e.g. trajectories/."),
    fmt: str = FormatOption,
    view: str = typer.Option("sft", "--view", help="View to export: sft (default), dpo, replay, trajectories_current..."),
    as_of: Optional[str] = AsOfOption,
    where: Optional[str] = WhereOption,
    overwrite: bool = OverwriteOption,
    allow_empty: bool = AllowEmptyOption,
    sets: Optional[List[str]] = SetOption,
    min_interactions: int = typer.Option(
        GUIDE_MIN_INTERACTIONS, "--min-interactions", min=0,
        help="Warn (stderr, and `interactions` in --json) when the export holds fewer complete interactions (rows) "
             "than this, the guide's minimum for strategy 1, with the count per task; 0: no check."),
    license: Optional[str] = LicenseOption,
    push_to_hub: Optional[str] = PushOption,
    lake: Optional[Path] = LakeOption,
    json: bool = JsonOption,
) -> None:
    """Export the lake's trajectories as a training dataset (the sft view by default): the guide's
    `atropos_trajectory_export --format=parquet --output=trajectories/`."""
    from views.interactions import count_interactions, task_rows

    manifest = _export(lake, view, output, fmt, as_of, where, overwrite, allow_empty, sets, license, push_to_hub)
    count = count_interactions(output, manifest, min_interactions)
    warning = count.warning()
    if warning:  # one line on stderr; the per-task counts follow the summary (or sit in --json's `interactions`)
        err_console.print(f"[bold yellow]warning:[/] {literal(warning)}", highlight=False, soft_wrap=True)
    _print_export(manifest, view, output, json, {"interactions": count.as_dict()})
    if warning and not json and count.per_task:
        print_rows(task_rows(count), title="complete interactions per task")


def atropos_trajectory_export_main() -> None:
    run(_atropos_app, prog_name="atropos_trajectory_export")


# -- skill_to_instruction ----------------------------------------------------------------------------------------
_skills_app = App()
NO_DEFAULT = {"show_default": False}  # no [default: None] after an option without a default
SKILL_TO_INSTRUCTION_OPTIONS = [
    ("output", "--output", "-o"), ("skills", "--skills", NO_DEFAULT), ("lake", "--lake", NO_DEFAULT),
    ("min_uses", "--min-uses"), ("provenance", "--provenance"), ("since", "--since", NO_DEFAULT),
    ("now", "--now", NO_DEFAULT), ("min_success", "--min-success", NO_DEFAULT), ("min_lift", "--min-lift", NO_DEFAULT),
    ("confidence", "--confidence"), ("system_prompt", "--system-prompt", NO_DEFAULT), ("as_of", "--as-of", NO_DEFAULT),
    ("overwrite", "--overwrite"), Extra("json", bool, JsonOption),
]


def skill_to_instruction(values: dict, as_json: bool, quiet: bool) -> None:
    """Turn recent, proven, frequently used agent-created skills into instruction-tuning pairs: one .jsonl per
    skill, so that `cat ft_prompts/*.jsonl > instruction_dataset.jsonl` is a dataset."""
    from lake import RecordError, open_lake
    from views.skills import instruction_from_connection, instruction_from_folder, write_instruction_files

    json = values.pop("json")
    cfg = SkillToInstructionConfig(**values)
    skills_dir, lake_root = cfg.source()
    kw = dict(min_uses=cfg.min_uses, provenance=cfg.provenance, system_prompt=cfg.system_prompt)
    try:
        if skills_dir is not None:
            if not skills_dir.is_dir():
                fail(f"--skills {skills_dir}: no such folder")
            result, folder = instruction_from_folder(skills_dir, **kw)
            source = {"skills_folder_sha256": folder.digest, "skill_files": len(folder.skills),
                      "usage_records": len(folder.usage)}
            problems = [{"path": p.path, "reason": p.reason} for p in folder.problems]
        else:
            lk = open_lake(lake_root)
            snap = lk.snapshot(cfg.as_of, for_query="SELECT * FROM instruction_candidates, instruction, "
                                                    "instruction_funnel")
            try:
                result = instruction_from_connection(snap.con, since=cfg.since_at, min_success=cfg.min_success,
                                                     min_lift=cfg.min_lift, z=cfg.z, **kw)
                source = {"lake_versions": dict(sorted(snap.versions.items()))}
            finally:
                snap.close()
            problems = []
        manifest = write_instruction_files(result, cfg.output, overwrite=cfg.overwrite, source=source,
                                           filters=cfg.filters())
    except RecordError as exc:  # a folder entry the lake could not store either (.usage.json nested 300 deep)
        fail(f"--skills {skills_dir}: {exc.message} (field {exc.field}); nothing was written")
    summary = {
        "output": str(cfg.output), "selected": len(result.candidates), "converted": len(result.converted),
        "pairs": len(result.pairs), "skipped": [{"skill": c["name"], "reason": c["reason"]} for c in result.skipped],
        "unreadable": problems, "files": [f["path"] for f in manifest["files"]], "filters": manifest["filters"],
        "source": str(skills_dir if skills_dir is not None else lake_root), "why_none": result.why_none(cfg.min_uses),
    }
    if json:
        print_json(summary)
        return
    console.print(literal(f"selected {len(result.candidates)} skills ({_filter_text(cfg)}); converted "
                          f"{len(result.converted)} into {len(result.pairs)} pairs in {cfg.output}"), highlight=False)
    if summary["why_none"]:
        err_console.print(literal(f"nothing selected from {summary['source']}: {summary['why_none']}; {TRY_SAMPLES}"),
                          highlight=False, soft_wrap=True)
    if result.skipped:
        print_rows([{"skill": c["name"], "uses": c["uses"], "reason": c["reason"]} for c in result.skipped],
                   title=f"skipped {len(result.skipped)} skills")
    if problems:
        print_rows(problems, title=f"{len(problems)} SKILL.md files could not be read")


def _filter_text(cfg: SkillToInstructionConfig) -> str:
    parts = [f"provenance {cfg.provenance}", f">= {cfg.min_uses} uses"]
    if cfg.since_at:
        parts.append(f"version since {cfg.since_at.isoformat()}")
    if cfg.min_success is not None:
        parts.append(f"success >= {cfg.min_success}")
    if cfg.min_lift is not None:
        parts.append(f"lift >= {cfg.min_lift} at {cfg.confidence:.0%}")
    return ", ".join(parts)


_skills_app.command(name="skill-to-instruction", help=inspect.getdoc(skill_to_instruction))(
    config_command(SkillToInstructionConfig, SKILL_TO_INSTRUCTION_OPTIONS, skill_to_instruction, output_options=False))


def skill_to_instruction_main() -> None:
    run(_skills_app, prog_name="skill_to_instruction")
