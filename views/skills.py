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
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from views.export import ExportError, set_variables
from views.registry import register_views, view_sql_hash

# Hermes' scanners skip these folders (tools/skills_tool.py), and any dot-folder.
SKIP_DIRS = {".git", ".github", ".hub", ".archive", ".venv", "venv", "node_modules", "site-packages",
             "__pycache__", ".tox", ".nox"}
USAGE_DEFAULTS = {"archived_at": None, "created_at": None, "created_by": None, "last_patched_at": None,
                  "last_used_at": None, "last_viewed_at": None, "patch_count": 0, "pinned": False,
                  "state": "active", "use_count": 0, "view_count": 0}
LINE_FIELDS = ("messages", "skill", "category", "kind")
MANIFEST_NAME = "manifest.json"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


# -- reading a Hermes skills folder ------------------------------------------------------------------------
@dataclass
class FolderProblem:
    path: str
    reason: str


@dataclass
class HermesFolder:
    root: Path
    skills: list[dict] = field(default_factory=list)
    usage: list[dict] = field(default_factory=list)
    problems: list[FolderProblem] = field(default_factory=list)
    digest: str = ""


def _split_frontmatter(text: str) -> tuple[str, str] | None:
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.startswith("---"):
        return None
    m = re.search(r"\n---\s*(\n|$)", text[3:])
    if not m:
        return None
    return text[3:m.start() + 3], text[m.end() + 3:]


def _parse_frontmatter(fm_text: str) -> dict:
    try:
        import yaml

        data = yaml.safe_load(fm_text)
        if isinstance(data, dict):
            return data
    except Exception:  # not YAML (or no yaml installed): Hermes' own line scan
        pass
    out = {}
    for line in fm_text.splitlines():
        if ":" in line and not line.startswith((" ", "\t", "-")):
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip().strip("'\"")
    return out


def _read_bundled(root: Path) -> set[str]:
    try:
        lines = (root / ".bundled_manifest").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    return {ln.partition(":")[0].strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def _read_hub(root: Path) -> dict:
    try:
        data = json.loads((root / ".hub" / "lock.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    inst = data.get("installed") if isinstance(data, dict) else None
    return inst if isinstance(inst, dict) else {}


def read_hermes_folder(root: str | os.PathLike) -> HermesFolder:
    """Skill and usage records (lake payload shape) for a Hermes `skills/` folder."""
    root = Path(root)
    if not root.is_dir():
        raise ExportError(f"skills folder {root} does not exist")
    out = HermesFolder(root=root)
    bundled, hub = _read_bundled(root), _read_hub(root)
    digest = hashlib.sha256()
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "SKILL.md" in filenames:
            paths.append(Path(dirpath) / "SKILL.md")
    for p in sorted(paths, key=lambda q: q.relative_to(root).as_posix()):
        rel = p.relative_to(root)
        data = p.read_bytes()
        digest.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            out.problems.append(FolderProblem(rel.as_posix(), "not valid UTF-8"))
            continue
        split = _split_frontmatter(text)
        if split is None:
            out.problems.append(FolderProblem(rel.as_posix(), "no '---' frontmatter block"))
            continue
        fm = _parse_frontmatter(split[0])
        name = str(fm.get("name") or "").strip() or rel.parent.name
        folder = rel.parent.name
        if folder in hub or name in hub:
            prov = "hub"
        elif name in bundled:
            prov = "bundled"
        else:
            prov = "agent"
        desc = fm.get("description")
        parts = rel.parts
        category = parts[0] if len(parts) >= 3 else (fm.get("category") if isinstance(fm.get("category"), str) else None)
        out.skills.append({
            "name": name, "event_type": "skill.upsert", "category": category, "path": rel.as_posix(),
            "provenance": prov, "description": None if desc is None else str(desc),
            "frontmatter": json.dumps(fm, default=str, sort_keys=True), "body": split[1], "deleted": False,
        })
    usage_path = root / ".usage.json"
    if usage_path.is_file():
        raw = usage_path.read_bytes()
        digest.update(b".usage.json\0" + hashlib.sha256(raw).digest())
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise ExportError(f"{usage_path} is not valid JSON: {exc}") from None
        for name, rec in sorted((obj if isinstance(obj, dict) else {}).items()):
            if not isinstance(rec, dict):
                continue
            rec = {**USAGE_DEFAULTS, **rec}
            out.usage.append({
                "name": name, "use_count": _int(rec.get("use_count")), "view_count": _int(rec.get("view_count")),
                "patch_count": _int(rec.get("patch_count")), "last_used_at": rec.get("last_used_at"),
                "usage": json.dumps(rec, sort_keys=True, default=str),
            })
    out.digest = digest.hexdigest()
    return out


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    return None


def folder_connection(folder: HermesFolder) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with every lake table (skills and skill_usage from the folder, the rest empty)
    and every views/*.sql registered."""
    from lake.schemas import TABLES, table_schema

    con = duckdb.connect()
    for table in TABLES:
        rows = {"skills": folder.skills, "skill_usage": folder.usage}.get(table, [])
        con.register(f"__{table}", _lake_rows(table, rows, table_schema(table)))
        con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "__{table}"')
    register_views(con)
    return con


def _lake_rows(table: str, rows: list[dict], schema: pa.Schema) -> pa.Table:
    full = []
    for i, r in enumerate(rows):
        d = {f.name: None for f in schema}
        d.update(r)
        d.update({
            "event_id": f"folder:{table}:{i:08d}", "event_type": r.get("event_type") or table,
            "schema_version": 1,
            "occurred_at": _EPOCH + _dt.timedelta(microseconds=i), "ingested_at": _EPOCH,
            "source": "hermes-folder",
            "content_hash": hashlib.blake2b(json.dumps(r, sort_keys=True, default=str).encode(), digest_size=16).hexdigest(),
            "day": "1970-01-01",
        })
        full.append(d)
    return pa.Table.from_pylist(full, schema=schema)


# -- converting ---------------------------------------------------------------------------------------------
@dataclass
class InstructionResult:
    candidates: list[dict]
    pairs: list[dict]

    @property
    def converted(self) -> list[dict]:
        return [c for c in self.candidates if c["status"] == "ok"]

    @property
    def skipped(self) -> list[dict]:
        return [c for c in self.candidates if c["status"] != "ok"]


def instruction_from_connection(con: duckdb.DuckDBPyConnection, *, min_uses: int = 5,
                                provenance: str = "agent", system_prompt: str | None = None) -> InstructionResult:
    variables: dict[str, Any] = {"instruction_min_uses": int(min_uses), "instruction_provenance": provenance}
    if system_prompt:
        variables["instruction_system_prompt"] = system_prompt
    set_variables(con, variables)
    cand = con.sql("SELECT name, category, provenance, uses, uses_source, status, reason, headings "
                   "FROM instruction_candidates ORDER BY name").to_arrow_table().to_pylist()
    pairs = con.sql("SELECT messages, skill, category, kind FROM instruction "
                    "ORDER BY skill, kind_index").to_arrow_table().to_pylist()
    return InstructionResult(cand, pairs)


def skill_file_name(skill: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", skill).strip("._") or "skill"
    if safe != skill:
        safe += "-" + hashlib.md5(skill.encode()).hexdigest()[:8]
    return safe + ".jsonl"


def write_instruction_files(result: InstructionResult, output: str | os.PathLike, *, overwrite: bool = False,
                            source: dict | None = None) -> dict:
    """One `<skill>.jsonl` per converted skill (lines: messages, skill, category, kind) + manifest.json."""
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
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    files = []
    try:
        for skill in sorted(by_skill):
            name = skill_file_name(skill)
            path = tmp / name
            with path.open("w", encoding="utf-8", newline="\n") as f:
                for p in by_skill[skill]:
                    line = {k: p[k] for k in LINE_FIELDS}
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
            files.append({"path": name, "skill": skill, "rows": len(by_skill[skill]),
                          "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
        manifest = {
            "manifest_version": 1,
            "view": "instruction",
            "format": "jsonl",
            "source": source or {},
            "view_sql_sha256": view_sql_hash("instruction")["sha256"],
            "row_count": len(result.pairs),
            "selected": len(result.candidates),
            "converted": [c["name"] for c in result.converted],
            "skipped": {c["name"]: c["reason"] for c in result.skipped},
            "files": files,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.is_dir():
            for p in out.iterdir():
                p.unlink()
            for p in sorted(tmp.iterdir()):
                os.replace(p, out / p.name)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def instruction_from_folder(root: str | os.PathLike, **kw) -> tuple[InstructionResult, HermesFolder]:
    folder = read_hermes_folder(root)
    con = folder_connection(folder)
    try:
        return instruction_from_connection(con, **kw), folder
    finally:
        con.close()
