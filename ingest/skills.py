"""Hermes skill folders for ingest: lake.skill_files' reader with its errors as ingest's BadInput, and the
`skills`/`skill_usage` records the watcher and the server append (with the metadata ingest keeps).

How a SKILL.md is read (layouts, name fallback, categories, provenance) is lake/skill_files.py's job alone, so
the watcher, the server and skill_to_instruction's folder reader cannot drift apart.
"""
from __future__ import annotations

from pathlib import Path

from edge.errors import BadInput
from lake.skill_files import SkillFile, SkillFileError, read_skill_file, skill_payload
from lake.skill_files import parse_usage as _parse_usage


def bad_input(exc: SkillFileError) -> BadInput:
    return BadInput(exc.reason, line=exc.line, field=exc.field, kind=exc.kind)


def parse_skill(data: bytes, rel_path: str) -> SkillFile:
    """One SKILL.md (bytes, path relative to the skills folder). Raises BadInput naming the line / field."""
    try:
        return read_skill_file(data, rel_path)
    except SkillFileError as exc:
        raise bad_input(exc) from None


def parse_usage(data: bytes) -> dict[str, dict]:
    """The `.usage.json` sidecar's bytes with missing keys filled in; BadInput when unreadable."""
    try:
        return _parse_usage(data)
    except SkillFileError as exc:
        raise bad_input(exc) from None


def skill_record(doc: SkillFile, *, root: Path, prov: str, hub_entry: dict | None,
                 category_description: str | None) -> dict:
    meta = {"sha256": doc.sha256, "root": str(Path(root).resolve()), "size": doc.size}
    if hub_entry:
        meta["hub"] = hub_entry
    if category_description:
        meta["category_description"] = category_description
    if doc.warnings:
        meta["warnings"] = list(doc.warnings)
    return {**skill_payload(doc, prov), "metadata": meta}
