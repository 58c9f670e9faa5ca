"""Commands of the views wing: `lake export`, `lake views`, and the guide's `atropos_trajectory_export` and
`skill_to_instruction` console scripts.

Heavy imports (duckdb, pyarrow, the modules that run views) happen inside the command bodies; every command's
options are generated from the fields of its config dataclass (lachesis/console.py `config_command`): defaults,
help and validation come from views.export_config and views.instruction_config, which import nothing heavy.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import List, Optional

import typer

from lachesis.console import (App, Extra, JsonOption, LakeOption, config_command, console, err_console, fail, literal,
                              print_json, print_rows, run)
from views.export_config import AtroposExportConfig, ExportConfig, ViewsConfig
from views.instruction_config import TRY_SAMPLES, SkillToInstructionConfig

NO_DEFAULT = {"show_default": False}  # no [default: None] after an option without a default
EXPORT_FLAGS = {  # the options `lake export` and atropos_trajectory_export share, in --help order around --view
    "output": ("output", "--output", "-o"), "format": ("format", "--format"),
    "as_of": ("as_of", "--as-of", NO_DEFAULT), "where": ("where", "--where", NO_DEFAULT),
    "overwrite": ("overwrite", "--overwrite"), "allow_empty": ("allow_empty", "--allow-empty"),
    "sets": ("sets", "--set", {"annotation": Optional[List[str]], "show_default": False}),
    "license": ("license", "--license", NO_DEFAULT),
    "push_to_hub": ("push_to_hub", "--push-to-hub", {"metavar": "REPO", "show_default": False}),
}
AFTER_VIEW = ["as_of", "where", "overwrite", "allow_empty", "sets"]
HF_OPTIONS = ["license", "push_to_hub"]
EXPORT_OPTIONS = [
    ("view",), *(EXPORT_FLAGS[n] for n in ["output", "format", *AFTER_VIEW, *HF_OPTIONS]),
    Extra("lake", Optional[Path], LakeOption), Extra("json", bool, JsonOption),
]
ATROPOS_OPTIONS = [
    EXPORT_FLAGS["output"], EXPORT_FLAGS["format"], ("view", "--view"), *(EXPORT_FLAGS[n] for n in AFTER_VIEW),
    ("min_interactions", "--min-interactions"), *(EXPORT_FLAGS[n] for n in HF_OPTIONS),
    Extra("lake", Optional[Path], LakeOption), Extra("json", bool, JsonOption),
]
VIEWS_OPTIONS = [Extra("lake", Optional[Path], LakeOption), ("counts", "--counts"), Extra("json", bool, JsonOption)]


def _export(lake: Optional[Path], cfg: ExportConfig) -> dict:
    """Run one export (and the Hub push); returns its manifest, or fails with one line."""
    from lake import open_lake
    from views.export import export_view

    lk = open_lake(lake)
    if cfg.format != "hf":
        return export_view(lk, cfg.view, cfg.output, format=cfg.format, **cfg.export_arguments())
    from views.export_hf import export_view_hf, push_to_hub as push  # datasets: a slow import, for this format only

    manifest = export_view_hf(lk, cfg.view, cfg.output, license=cfg.license, **cfg.export_arguments())
    if cfg.push_to_hub:
        push(cfg.output, cfg.push_to_hub)
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


def export(values: dict, as_json: bool, quiet: bool) -> None:
    """Write a view on a pinned lake version as a dataset folder (parquet/jsonl + manifest.json, or a Hugging Face
    datasets folder with a dataset card)."""
    lake, json = values.pop("lake"), values.pop("json")
    cfg = ExportConfig(**values)
    _print_export(_export(lake, cfg), cfg.view, cfg.output, json)


def views(values: dict, as_json: bool, quiet: bool) -> None:
    """List the dataset views and the helper views they use (with --counts, their rows on the latest snapshot)."""
    import duckdb

    from lake import open_lake
    from lake.query import ident
    from views import HELPER_VIEWS, list_views, view_description

    lake, json = values.pop("lake"), values.pop("json")
    cfg = ViewsConfig(**values)
    lk = open_lake(lake)
    snap = lk.snapshot()
    try:
        rows = []
        for name in list_views(lk.views_dir):
            err = snap.view_errors.get(name)
            count = None
            if err is None and cfg.counts:
                try:
                    count = snap.sql(f"SELECT count(*) FROM {ident(name)}").fetchall()[0][0]
                except duckdb.Error as exc:  # a view that fails on this lake's data: show why
                    err = str(exc).splitlines()[0]
            row = {"view": name, "kind": "helper" if name in HELPER_VIEWS else "dataset"}
            if cfg.counts:
                row["rows"] = count
            row["description"] = err or view_description(name, lk.views_dir)
            rows.append(row)
    finally:
        snap.close()
    print_json(rows) if json else print_rows(rows, title=f"views on lake {lk.root}")


def register(app: typer.Typer) -> None:
    app.command("export", help=inspect.getdoc(export))(config_command(ExportConfig, EXPORT_OPTIONS, export,
                                                                      output_options=False))
    app.command("views", help=inspect.getdoc(views))(config_command(ViewsConfig, VIEWS_OPTIONS, views,
                                                                    output_options=False))


# -- atropos_trajectory_export ----------------------------------------------------------------------------------
def atropos_trajectory_export(values: dict, as_json: bool, quiet: bool) -> None:
    """Export the lake's trajectories as a training dataset (the sft view by default): the guide's
    `atropos_trajectory_export --format=parquet --output=trajectories/`."""
    from views.interactions import count_interactions, task_rows

    lake, json = values.pop("lake"), values.pop("json")
    cfg = AtroposExportConfig(**values)
    manifest = _export(lake, cfg)
    count = count_interactions(cfg.output, manifest, cfg.min_interactions)
    warning = count.warning()
    if warning:  # one line on stderr; the per-task counts follow the summary (or sit in --json's `interactions`)
        err_console.print(f"[bold yellow]warning:[/] {literal(warning)}", highlight=False, soft_wrap=True)
    _print_export(manifest, cfg.view, cfg.output, json, {"interactions": count.as_dict()})
    if warning and not json and count.per_task:
        print_rows(task_rows(count), title="complete interactions per task")


_atropos_app = App()
_atropos_app.command(name="atropos-trajectory-export", help=inspect.getdoc(atropos_trajectory_export))(
    config_command(AtroposExportConfig, ATROPOS_OPTIONS, atropos_trajectory_export, output_options=False))


def atropos_trajectory_export_main() -> None:
    run(_atropos_app, prog_name="atropos_trajectory_export")


# -- skill_to_instruction ----------------------------------------------------------------------------------------
_skills_app = App()
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
