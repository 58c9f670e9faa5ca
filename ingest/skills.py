"""Hermes skill folders: SKILL.md frontmatter, categories, provenance and the `.usage.json` sidecar.

Layouts (hermes-formats.md 2.1): `<name>/SKILL.md` (flat), `<category>/<name>/SKILL.md`,
`<category>/<sub>/<name>/SKILL.md` (nested; the category is the first path part when the relative path has
3 or more parts, as `tools/skills_tool.py::_get_category_from_path`). `<category>/DESCRIPTION.md` describes a
category. Provenance: `hub` when the skill's folder is a key of `.hub/lock.json` `installed`, `bundled` when
its name is in `.bundled_manifest` (`name:md5` lines), else `agent`.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

from ingest.errors import BadInput

SKIP_DIRS = {".git", ".github", ".hub", ".archive", ".venv", "venv", "node_modules", "site-packages",
             "__pycache__", ".tox", ".nox"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_SKILL_CHARS = 100_000  # Hermes' limit for skill_manage(create); bundled skills exceed it: a warning
MAX_SKILL_BYTES = 1 << 20  # beyond this a SKILL.md is refused
MAX_DESCRIPTION = 1024

USAGE_DEFAULTS = {"archived_at": None, "created_at": None, "created_by": None, "last_patched_at": None,
                  "last_used_at": None, "last_viewed_at": None, "patch_count": 0, "pinned": False,
                  "state": "active", "use_count": 0, "view_count": 0}


def valid_name(name) -> bool:
    return isinstance(name, str) and len(name) <= 64 and bool(NAME_RE.match(name)) and ".." not in name


def split_frontmatter(text: str):
    """-> (frontmatter text, body) or raise BadInput. A leading BOM is ignored (as Hermes does)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.startswith("---"):
        raise BadInput("SKILL.md does not start with a '---' frontmatter block", line=1, kind="no_frontmatter")
    m = re.search(r"\n---\s*(\n|$)", text[3:])
    if not m:
        raise BadInput("the frontmatter block is not closed by a '---' line", line=1, kind="unclosed_frontmatter")
    return text[3:m.start() + 3], text[m.end() + 3:]


def parse_frontmatter(fm_text: str) -> dict:
    try:
        data = yaml.safe_load(fm_text)
    except yaml.YAMLError as exc:
        line = None
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            line = mark.line + 2  # +1 for 1-based, +1 for the opening '---'
        data = _line_scan(fm_text)
        if not data.get("name"):
            raise BadInput(f"frontmatter is not valid YAML: {str(exc).splitlines()[0]}", line=line,
                           kind="bad_yaml") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadInput("frontmatter must be a YAML mapping", line=2, kind="bad_yaml")
    return data


def _line_scan(fm_text: str) -> dict:
    out = {}
    for line in fm_text.splitlines():
        if ":" in line and not line.startswith((" ", "\t", "-")):
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip().strip("'\"")
    return out


def category_of(rel_parts) -> str | None:
    return rel_parts[0] if len(rel_parts) >= 3 else None


@dataclass
class SkillDoc:
    name: str
    category: str | None
    rel_path: str
    description: str | None
    frontmatter: dict
    body: str
    sha256: str
    size: int
    warnings: list = field(default_factory=list)


def parse_skill(data: bytes, rel_path: str) -> SkillDoc:
    """Parse one SKILL.md (bytes). Raises BadInput naming the line / field and the reason."""
    if b"\x00" in data:
        raise BadInput("binary file (NUL bytes), not a SKILL.md", kind="binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise BadInput(f"not valid UTF-8 at byte {exc.start}", line=line, kind="bad_encoding") from None
    if len(data) > MAX_SKILL_BYTES:
        raise BadInput(f"SKILL.md has {len(data)} bytes, more than {MAX_SKILL_BYTES}", kind="too_large")
    fm_text, body = split_frontmatter(text)
    fm = parse_frontmatter(fm_text)
    name = fm.get("name")
    if name is None or (isinstance(name, str) and not name.strip()):
        raise BadInput("frontmatter has no 'name'", field="name", line=2, kind="missing")
    if not isinstance(name, str):
        name = str(name)
    name = name.strip()
    if not valid_name(name):
        raise BadInput(f"skill name {name!r} is not allowed (letters, digits, '.', '_', '-'; at most 64; "
                       "no path separators)", field="name", kind="bad_name")
    desc = fm.get("description")
    warnings = []
    if len(text) > MAX_SKILL_CHARS:
        warnings.append(f"longer than {MAX_SKILL_CHARS} characters")
    if desc is not None and not isinstance(desc, str):
        desc = str(desc)
    if desc is None:
        warnings.append("no description")
    elif len(desc) > MAX_DESCRIPTION:
        warnings.append(f"description longer than {MAX_DESCRIPTION} characters")
    if not body.strip():
        raise BadInput("SKILL.md has an empty body", kind="empty_body")
    parts = Path(rel_path).parts
    category = category_of(parts)
    fm_cat = fm.get("category")
    if category is None and isinstance(fm_cat, str) and valid_name(fm_cat):
        category = fm_cat
    return SkillDoc(name=name, category=category, rel_path=rel_path, description=desc,
                    frontmatter=_jsonable(fm), body=body, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                    warnings=warnings)


def _jsonable(obj):
    return orjson.loads(orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS))


def iter_skill_files(root: Path):
    """Every SKILL.md under root, skipping Hermes' excluded folders and any dot-folder."""
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "SKILL.md" in filenames:
            yield Path(dirpath) / "SKILL.md"


def read_bundled_manifest(root: Path) -> dict[str, str]:
    p = Path(root) / ".bundled_manifest"
    out = {}
    try:
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, h = line.partition(":")
            out[name.strip()] = h.strip()
    except OSError:
        pass
    return out


def read_hub_lock(root: Path) -> dict[str, dict]:
    p = Path(root) / ".hub" / "lock.json"
    try:
        data = orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    inst = data.get("installed") if isinstance(data, dict) else None
    return inst if isinstance(inst, dict) else {}


def provenance(name: str, folder: str, bundled: dict, hub: dict) -> tuple[str, dict | None]:
    if folder in hub or name in hub:
        entry = hub.get(folder) or hub.get(name)
        return "hub", entry if isinstance(entry, dict) else None
    if name in bundled:
        return "bundled", None
    return "agent", None


def read_category_descriptions(root: Path) -> dict[str, str]:
    """<category>/DESCRIPTION.md -> its description (frontmatter `description:` or the plain text)."""
    out = {}
    root = Path(root)
    for p in root.rglob("DESCRIPTION.md"):
        rel = p.relative_to(root).parts
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel[:-1]) or len(rel) < 2:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        desc = text.strip()
        try:
            fm_text, body = split_frontmatter(text)
            fm = parse_frontmatter(fm_text)
            if isinstance(fm.get("description"), str):
                desc = fm["description"]
        except BadInput:
            pass
        out["/".join(rel[:-1])] = desc
    return out


def skill_record(doc: SkillDoc, *, root: Path, prov: str, hub_entry: dict | None,
                 category_description: str | None) -> dict:
    meta = {"sha256": doc.sha256, "root": str(Path(root).resolve()), "size": doc.size}
    if hub_entry:
        meta["hub"] = hub_entry
    if category_description:
        meta["category_description"] = category_description
    if doc.warnings:
        meta["warnings"] = doc.warnings
    return {"name": doc.name, "event_type": "skill.upsert", "category": doc.category, "path": doc.rel_path,
            "provenance": prov, "description": doc.description, "frontmatter": doc.frontmatter, "body": doc.body,
            "deleted": False, "metadata": meta}


def read_usage(root: Path) -> dict[str, dict] | None:
    """The `.usage.json` sidecar with missing keys filled in; None when absent; BadInput when unreadable."""
    p = Path(root) / ".usage.json"
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f".usage.json is not valid JSON: {exc}", kind="json_invalid") from None
    if not isinstance(obj, dict):
        raise BadInput(".usage.json must be a JSON object keyed by skill name", kind="model_type")
    out = {}
    for name, rec in obj.items():
        if not isinstance(rec, dict):
            continue
        out[name] = {**USAGE_DEFAULTS, **rec}
    return out


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else (int(v) if isinstance(v, float) else None)


def usage_record(name: str, rec: dict) -> dict:
    return {"name": name, "use_count": _int(rec.get("use_count")), "view_count": _int(rec.get("view_count")),
            "patch_count": _int(rec.get("patch_count")),
            "last_used_at": rec.get("last_used_at") if isinstance(rec.get("last_used_at"), str) else None,
            "usage": rec}
