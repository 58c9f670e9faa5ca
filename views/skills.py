"""skill_to_instruction: skills -> instruction-tuning pairs, one .jsonl file per skill.

Two sources, one converter: the lake's `instruction` view on a snapshot, or a Hermes skills folder read
straight from disk (SKILL.md files, `.usage.json`, `.bundled_manifest`, `.hub/lock.json`). The folder is
loaded into an in-memory DuckDB as `skills` and `skill_usage` tables shaped exactly like the lake's, and the
same views/*.sql run on it, so both sources give the same files.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ground.atomic import folder_atomically
from ground.digest import file_sha256
from lake.envelope import content_hashes
from lake.records import validate_record
from lake.schemas import TABLES, payload_schema, table_schema
from lake.skill_files import (SkillFileError, folder_digest, read_bundled_manifest, read_hub_lock, read_skills,
                              read_usage, skill_folder, skill_payload, usage_payload)
from lake.skill_files import provenance as skill_provenance
from views.export import ExportError, set_variables
from views.registry import register_views, view_sql_hash

LINE_FIELDS = ("messages", "skill", "category", "kind")
MANIFEST_NAME = "manifest.json"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


# -- reading a Hermes skills folder (lake.skill_files, the reader the watcher uses too) ------------------------
@dataclass
class HermesFolder:
    root: Path
    skills: list[dict] = field(default_factory=list)
    usage: list[dict] = field(default_factory=list)
    problems: list[SkillFileError] = field(default_factory=list)  # .path and .reason of each refused file
    digest: str = ""


def read_hermes_folder(root: str | os.PathLike) -> HermesFolder:
    """Skill and usage records (lake payload shape) for a Hermes `skills/` folder, read as `lake watch` reads it."""
    root = Path(root)
    if not root.is_dir():
        raise ExportError(f"skills folder {root} does not exist")
    docs, errors = read_skills(root)
    bundled, hub = read_bundled_manifest(root), read_hub_lock(root)
    try:
        usage = read_usage(root)
    except SkillFileError as exc:
        raise ExportError(f"{root / exc.path}: {exc.reason}") from None
    out = HermesFolder(root=root, problems=errors)
    for doc in docs:
        prov, _ = skill_provenance(doc.name, skill_folder(doc), bundled, hub)
        out.skills.append(skill_payload(doc, prov))
    out.usage = [usage_payload(name, rec) for name, rec in (usage or {}).items()]
    out.digest = folder_digest(root, usage is not None)  # no link followed, no FIFO opened (ground/files.py)
    return out


def folder_connection(folder: HermesFolder) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with every lake table (skills and skill_usage from the folder, the rest empty)
    and every views/*.sql registered."""
    con = duckdb.connect()
    for table in TABLES:
        rows = {"skills": folder.skills, "skill_usage": folder.usage}.get(table, [])
        con.register(f"__{table}", _lake_rows(table, rows))
        con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "__{table}"')
    register_views(con)
    return con


def _lake_rows(table: str, records: list[dict]) -> pa.Table:
    """The records as the lake stores them (validate_record's payload, JSON columns as text) under a fixed
    envelope: event ids and times in folder order, so the same folder always gives the same rows."""
    rows = [validate_record(table, r, i) for i, r in enumerate(records)]
    payload = pa.Table.from_pylist([r.payload for r in rows], schema=payload_schema(table))
    envelope = {
        "event_id": [f"folder:{table}:{i:08d}" for i in range(len(rows))],
        "event_type": [r.event_type for r in rows],
        "schema_version": [1] * len(rows),
        "occurred_at": [_EPOCH + _dt.timedelta(microseconds=i) for i in range(len(rows))],
        "ingested_at": [_EPOCH] * len(rows),
        "source": ["hermes-folder"] * len(rows),
        "content_hash": content_hashes(payload),
        "day": ["1970-01-01"] * len(rows),
    }
    schema = table_schema(table)
    return pa.Table.from_arrays([envelope[f.name] if f.name in envelope else payload.column(f.name)
                                 for f in schema], schema=schema)


# -- converting ---------------------------------------------------------------------------------------------
@dataclass
class InstructionResult:
    candidates: list[dict]
    pairs: list[dict]
    funnel: list[dict] = field(default_factory=list)  # instruction_funnel's rows: why these were selected

    def why_none(self, min_uses: int) -> str:
        """Which filter took every skill, in one sentence ('' when something was selected)."""
        if self.candidates:
            return ""
        total = sum(r["skills"] for r in self.funnel)
        if not total:
            return "there are no skills"
        by = ", ".join(f"{r['skills']} {r['provenance']}" for r in self.funnel)
        kept = [r for r in self.funnel if r["provenance_kept"]]
        if not kept:
            return (f"none of the {total} skills ({by}) has the provenance asked for (created by the agent: not "
                    "listed in .bundled_manifest or .hub/lock.json)")
        usage = sum(r["with_usage"] for r in kept)
        n = sum(r["skills"] for r in kept)
        return (f"none of the {n} skills of the provenance asked for (of {total}: {by}) was used {min_uses} times or "
                f"more ({usage} have .usage.json counts)")

    @property
    def converted(self) -> list[dict]:
        return [c for c in self.candidates if c["status"] == "ok"]

    @property
    def skipped(self) -> list[dict]:
        return [c for c in self.candidates if c["status"] != "ok"]


def keep_skill_uses(con: duckdb.DuckDBPyConnection) -> None:
    """Compute the skill_uses view once for this connection: a TEMP table of its rows, which shadows the view in
    every later query of the connection (DuckDB binds a name to a temp table first, inside views too). Why:
    skill_uses reads every message of every current trajectory, skill_effect reads it twice, and
    instruction_candidates, instruction and instruction_funnel each read skill_effect: one selection passed over
    the messages eight times (bench/ui_pages.py). Only for a connection whose tables stay as they are after the
    call (a pinned snapshot that is not refreshed); a second call keeps the first table."""
    con.execute("CREATE TEMP TABLE IF NOT EXISTS skill_uses AS SELECT * FROM skill_uses")


def instruction_from_connection(con: duckdb.DuckDBPyConnection, *, min_uses: int = 5, provenance: str = "agent",
                                system_prompt: str | None = None, since: _dt.datetime | None = None,
                                min_success: float | None = None, min_lift: float | None = None,
                                z: float | None = None) -> InstructionResult:
    """The selected skills and their pairs. `since`, `min_success` and `min_lift` (recent, proven effective: see
    instruction_candidates.sql and skill_effect.sql) are off when None; `z` sets skill_effect's interval width."""
    variables: dict[str, Any] = {"instruction_min_uses": int(min_uses), "instruction_provenance": provenance}
    optional = {"instruction_system_prompt": system_prompt or None,
                "instruction_since": since.isoformat() if since else None,
                "instruction_min_success": min_success, "instruction_min_lift": min_lift, "skill_effect_z": z}
    variables.update({k: v for k, v in optional.items() if v is not None})
    set_variables(con, variables)
    keep_skill_uses(con)
    cand = con.sql("SELECT name, category, provenance, uses, uses_source, status, reason, goal_source, headings, "
                   "updated_at, used_in_trajectories, success_rate, success_diff, success_diff_low "
                   "FROM instruction_candidates ORDER BY name").to_arrow_table().to_pylist()
    pairs = con.sql("SELECT messages, skill, category, kind FROM instruction "
                    "ORDER BY skill, kind_index").to_arrow_table().to_pylist()
    funnel = con.sql("SELECT * FROM instruction_funnel ORDER BY provenance").to_arrow_table().to_pylist()
    return InstructionResult(cand, pairs, funnel)


def skill_file_name(skill: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", skill).strip("._") or "skill"
    if safe != skill:
        safe += "-" + hashlib.md5(skill.encode()).hexdigest()[:8]
    return safe + ".jsonl"


def write_instruction_files(result: InstructionResult, output: str | os.PathLike, *, overwrite: bool = False,
                            source: dict | None = None, filters: dict | None = None) -> dict:
    """One `<skill>.jsonl` per converted skill (lines: messages, skill, category, kind) + manifest.json, which
    records the source (lake versions or the folder's digest), every filter, and each selected skill's evidence."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise ExportError(f"output {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"output folder {out} is not empty; pass --overwrite to replace it")
        stray = [p.name for p in out.iterdir() if not (p.is_file() and (p.suffix == ".jsonl" or p.name == MANIFEST_NAME))]
        if stray:
            raise ExportError(f"refusing to overwrite {out}: it holds other files ({', '.join(sorted(stray)[:5])})")
    by_skill: dict[str, list[dict]] = {}
    for p in result.pairs:
        by_skill.setdefault(p["skill"], []).append(p)
    files = []
    # an existing output folder stays; its files (the checks above allowed only ours) make way for the new ones
    with folder_atomically(out, in_place_of=list(out.iterdir()) if out.is_dir() else None) as tmp:
        for skill in sorted(by_skill):
            name = skill_file_name(skill)
            path = tmp / name
            with path.open("w", encoding="utf-8", newline="\n") as f:
                for p in by_skill[skill]:
                    line = {k: p[k] for k in LINE_FIELDS}
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
            files.append({"path": name, "skill": skill, "rows": len(by_skill[skill]),
                          "sha256": file_sha256(path)})
        manifest = {
            "manifest_version": 1,
            "view": "instruction",
            "format": "jsonl",
            "source": source or {},
            # at the top as well, where lake.as_of reads a manifest: `--as-of ft_prompts/` pins the same snapshot
            **({"lake_versions": source["lake_versions"]} if "lake_versions" in (source or {}) else {}),
            "filters": filters or {},
            "view_sql_sha256": view_sql_hash("instruction")["sha256"],
            "row_count": len(result.pairs),
            "selected": len(result.candidates),
            "converted": [c["name"] for c in result.converted],
            "skipped": {c["name"]: c["reason"] for c in result.skipped},
            # a folder's skills have no version times (folder_connection numbers them from 1970)
            "evidence": {c["name"]: _evidence(c, "lake_versions" in (source or {})) for c in result.candidates},
            "files": files,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _evidence(candidate: dict, timed: bool) -> dict:
    """What selected a skill: its uses, its version's time (when `timed`), and skill_effect's figures."""
    at = candidate["updated_at"] if timed else None
    return {"uses": candidate["uses"], "uses_source": candidate["uses_source"],
            "version_at": at.astimezone(_dt.timezone.utc).isoformat() if at else None,
            "trajectories": candidate["used_in_trajectories"], "success_rate": candidate["success_rate"],
            "success_diff": candidate["success_diff"], "success_diff_low": candidate["success_diff_low"]}


def instruction_from_folder(root: str | os.PathLike, **kw) -> tuple[InstructionResult, HermesFolder]:
    folder = read_hermes_folder(root)
    con = folder_connection(folder)
    try:
        return instruction_from_connection(con, **kw), folder
    finally:
        con.close()
