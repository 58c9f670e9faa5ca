"""Reading a Hermes skills folder: one SKILL.md (frontmatter, body, name, category) and the files around it
(`.bundled_manifest`, `.hub/lock.json`, `.usage.json`, `<category>/DESCRIPTION.md`).

One pure reader for every caller: the watcher and the HTTP server (ingest/) and the folder converter of
skill_to_instruction (views/) must read the same file the same way, and lake/ is the one layer both may import
(docs/ARCHITECTURE.md). The rules follow Hermes 0.19.0 (docs/hermes-formats.md section 2):

* Layouts: `<name>/SKILL.md` (flat), `<category>/<name>/SKILL.md`, `<category>/<sub>/<name>/SKILL.md`
  (nested). The category is the first path part when the relative path has 3 or more parts
  (`tools/skills_tool.py::_get_category_from_path`); a flat skill may name one in its frontmatter.
* The name is the frontmatter's `name:`, else the skill's folder name (Hermes keys skills by a line scan
  of `name:` that falls back to the folder).
* Front matter that is not a YAML mapping is read by the same line scan, with a warning, not refused.
* Refused, as one `SkillFileError` naming the file and the field: not UTF-8, NUL bytes, over 1 MiB,
  no or an unclosed `---` block, a name that is not allowed, an empty body, front matter whose aliases
  expand beyond MAX_FRONTMATTER_NODES values or MAX_SKILL_BYTES characters, or refer to themselves.
  Why before building objects: PyYAML shares an aliased node, but every JSON-able copy (and the lake's
  JSON column) expands it; a 366-byte "billion laughs" (9 levels of 9 aliases, 387 M strings) made
  `lake serve` abort at 3.4 GB and `lake watch` commit a 302 MB row. The bound is counted on the composed
  node graph (linear in the text), so a bomb costs what its text costs.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from ground.errors import UserError
from ground.files import Refusal, read_regular

# Hermes' scanners skip these folders (tools/skills_tool.py), and any dot-folder.
SKIP_DIRS = frozenset({".git", ".github", ".hub", ".archive", ".venv", "venv", "node_modules", "site-packages",
                       "__pycache__", ".tox", ".nox"})
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_SKILL_CHARS = 100_000  # Hermes' limit for skill_manage(create); bundled skills exceed it: a warning
MAX_SKILL_BYTES = 1 << 20  # beyond this a SKILL.md is refused
MAX_DESCRIPTION = 1024
MAX_FRONTMATTER_DEPTH = 32  # Hermes' frontmatter nests 3 levels (metadata.hermes.tags); deeper is refused
# Hermes' bundled skills have at most a few dozen front matter values; the bound is on the expanded count
MAX_FRONTMATTER_NODES = 10_000
# Bounds looked at before YAML composes the front matter (PyYAML's composer is pure Python: 100,000 plain keys took
# 5 s): its size, and its lines plus commas, an upper bound on the keys and values it can hold in block or flow style
MAX_FRONTMATTER_BYTES = 64 << 10
MAX_FRONTMATTER_ITEMS = 2_000
# tools/skill_usage.py::_empty_record: what a sidecar record lacks is filled from here.
USAGE_DEFAULTS = {"archived_at": None, "created_at": None, "created_by": None, "last_patched_at": None,
                  "last_used_at": None, "last_viewed_at": None, "patch_count": 0, "pinned": False,
                  "state": "active", "use_count": 0, "view_count": 0}
USAGE_FILE = ".usage.json"
SIDECAR_BYTES = 16 << 20  # .usage.json, .hub/lock.json, .bundled_manifest, DESCRIPTION.md: far beyond Hermes'
#                            (the watcher reads them with the same limit)
MAX_DIGEST_BYTES = 256 << 20  # a file hashed for the folder digest (an oversized SKILL.md counts too)


class SkillFileError(UserError, ValueError):
    """A skill file that cannot be read as it is. `path` is relative to the skills folder, `field` the front
    matter key or part at fault (None for the whole file), `line` 1-based when known, `kind` a short code."""

    def __init__(self, path: str, reason: str, *, field: str | None = None, line: int | None = None,
                 kind: str = "bad_skill"):
        self.path, self.reason, self.field, self.line, self.kind = path, reason, field, line, kind
        where = ", ".join(x for x in (f"line {line}" if line is not None else "",
                                      f"field {field}" if field else "") if x)
        super().__init__(f"{path}: {where + ': ' if where else ''}{reason}")


@dataclass(frozen=True)
class SkillFile:
    name: str
    name_source: str  # "frontmatter" or "folder" (the fallback)
    category: str | None
    rel_path: str
    description: str | None
    frontmatter: dict  # JSON-able
    body: str
    sha256: str
    size: int
    warnings: tuple[str, ...] = ()


def valid_name(name) -> bool:
    return isinstance(name, str) and len(name) <= 64 and bool(NAME_RE.match(name)) and ".." not in name


def category_of(rel_parts) -> str | None:
    return rel_parts[0] if len(rel_parts) >= 3 else None


def split_frontmatter(text: str, path: str) -> tuple[str, str]:
    """-> (frontmatter text, body). A leading BOM is ignored (as Hermes does)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.startswith("---"):
        raise SkillFileError(path, "does not start with a '---' frontmatter block", line=1, kind="no_frontmatter")
    m = re.search(r"\n---\s*(\n|$)", text[3:])
    if not m:
        raise SkillFileError(path, "the frontmatter block is not closed by a '---' line", line=1,
                             kind="unclosed_frontmatter")
    return text[3:m.start() + 3], text[m.end() + 3:]


def parse_frontmatter(fm_text: str, path: str = "frontmatter") -> tuple[dict, str | None]:
    """-> (mapping, warning or None). YAML first; what is not a YAML mapping gets Hermes' line scan. Raises
    SkillFileError when it is larger than a front matter is (MAX_FRONTMATTER_BYTES, MAX_FRONTMATTER_ITEMS: checked
    before it is parsed), or when aliases would expand it beyond the bounds (checked before any object is built)."""
    size, items = len(fm_text.encode("utf-8", "surrogatepass")), fm_text.count("\n") + fm_text.count(",")
    if size > MAX_FRONTMATTER_BYTES:
        raise SkillFileError(path, f"frontmatter is {size} bytes, more than {MAX_FRONTMATTER_BYTES} (a skill's "
                             "front matter is a few hundred)", line=1, kind="frontmatter_too_large")
    if items > MAX_FRONTMATTER_ITEMS:
        raise SkillFileError(path, f"frontmatter has {items} lines and commas, more than {MAX_FRONTMATTER_ITEMS}: "
                             "more keys and values than a skill's front matter holds (a few dozen)", line=1,
                             kind="frontmatter_too_large")
    loader = yaml.SafeLoader(fm_text)
    try:
        node = loader.get_single_node()  # aliases are references to one node here: linear in the text
        if node is not None:
            _check_expansion(node, path)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:  # a flow nested hundreds deep exhausts PyYAML's recursive composer
        return _line_scan(fm_text), "frontmatter nests too deeply for YAML; read by line scan"
    except yaml.YAMLError as exc:
        where = ""
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            where = f" at line {exc.problem_mark.line + 2}"  # 1-based, after the opening '---'
        return _line_scan(fm_text), f"frontmatter is not valid YAML{where}; read by line scan"
    finally:
        loader.dispose()
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return _line_scan(fm_text), "frontmatter is not a YAML mapping; read by line scan"
    return _jsonable(data), None


def _check_expansion(root: yaml.Node, path: str) -> None:
    """Refuse a composed front matter whose aliases expand beyond MAX_FRONTMATTER_NODES values or
    MAX_SKILL_BYTES characters, or that contains itself (`&a [*a]`: infinite once copied). Each node's
    expanded size is computed once (iteratively, memoised by identity), so the check is linear in the graph."""
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, characters) once expanded
    open_: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in size:
            continue
        kids = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                else node.value if isinstance(node, yaml.SequenceNode) else [])
        if not children_done:
            if key in open_:
                raise SkillFileError(path, "frontmatter contains itself through an alias (a recursive anchor)",
                                     line=node.start_mark.line + 1, kind="yaml_alias_bomb")
            open_.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in size)
            continue
        open_.discard(key)
        values = 1 + sum(size[id(c)][0] for c in kids)
        chars = (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(size[id(c)][1] for c in kids)
        if values > MAX_FRONTMATTER_NODES or chars > MAX_SKILL_BYTES:
            raise SkillFileError(path, f"frontmatter aliases expand to more than {MAX_FRONTMATTER_NODES} values or "
                                 f"{MAX_SKILL_BYTES} characters (a YAML alias bomb)", line=node.start_mark.line + 1,
                                 kind="yaml_alias_bomb")
        size[key] = (values, chars)


def _line_scan(fm_text: str) -> dict:
    out = {}
    for line in fm_text.splitlines():
        if ":" in line and not line.startswith((" ", "\t", "-", "#")):
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip().strip("'\"")
    return out


def _jsonable(obj):
    """YAML values as JSON values: keys become strings, dates ISO text, anything else its str()."""
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(_jsonable(k)): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else str(obj)
    if isinstance(obj, (dt.date, dt.datetime)):
        return obj.isoformat()
    return str(obj)


def _depth(obj) -> int:
    """How deep lists and mappings nest in a parsed frontmatter (iterative: no recursion limit to hit)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def read_skill_file(data: bytes, rel_path: str) -> SkillFile:
    """Parse one SKILL.md. `rel_path` is its path relative to the skills folder (posix); its folder is the name
    fallback and its first part the category of a nested skill. Raises SkillFileError."""
    path = PurePosixPath(rel_path).as_posix()
    if b"\x00" in data:
        raise SkillFileError(path, "binary file (NUL bytes), not a SKILL.md", kind="binary")
    if len(data) > MAX_SKILL_BYTES:
        raise SkillFileError(path, f"{len(data)} bytes, more than {MAX_SKILL_BYTES}", kind="too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SkillFileError(path, f"not valid UTF-8 at byte {exc.start}", line=line, kind="bad_encoding") from None
    fm_text, body = split_frontmatter(text, path)
    fm, fm_warning = parse_frontmatter(fm_text, path)
    if _depth(fm) > MAX_FRONTMATTER_DEPTH:
        raise SkillFileError(path, f"frontmatter nests more than {MAX_FRONTMATTER_DEPTH} levels deep", line=2,
                             kind="too_deep")
    warnings = [fm_warning] if fm_warning else []
    parts = PurePosixPath(path).parts
    name, source = fm.get("name"), "frontmatter"
    if name is not None and not isinstance(name, str):
        name = str(name)
    if name is None or not name.strip():
        name, source = (parts[-2] if len(parts) >= 2 else ""), "folder"
        if not name:
            raise SkillFileError(path, "frontmatter has no 'name' and the file has no folder to name it",
                                 field="name", line=2, kind="missing")
        warnings.append("frontmatter has no 'name'; named after its folder")
    name = name.strip()
    if not valid_name(name):
        raise SkillFileError(path, f"skill name {name!r} is not allowed (letters, digits, '.', '_', '-'; at most 64; "
                             "no path separators)", field="name", kind="bad_name")
    if not body.strip():
        raise SkillFileError(path, "empty body", field="body", kind="empty_body")
    desc = fm.get("description")
    if desc is not None and not isinstance(desc, str):
        desc = str(desc)
    if desc is None:
        warnings.append("no description")
    elif len(desc) > MAX_DESCRIPTION:
        warnings.append(f"description longer than {MAX_DESCRIPTION} characters")
    if len(text) > MAX_SKILL_CHARS:
        warnings.append(f"longer than {MAX_SKILL_CHARS} characters")
    category = category_of(parts)
    if category is None and valid_name(fm.get("category")):
        category = fm["category"]
    return SkillFile(name=name, name_source=source, category=category, rel_path=path, description=desc,
                     frontmatter=fm, body=body, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                     warnings=tuple(warnings))


def iter_skill_files(root: str | os.PathLike, names: tuple[str, ...] = ("SKILL.md",)):
    """Every SKILL.md (or file of one of `names`, such as DESCRIPTION.md) under root in walk order (folders
    sorted, depth first), skipping Hermes' excluded folders and any dot-folder; folders that are symbolic links
    are not entered. This order decides which of two skills with one name is read (the first)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in names:
            if name in filenames:
                yield Path(dirpath) / name


def read_in_folder(root: str | os.PathLike, rel: str, limit: int) -> bytes:
    """A file of the skills folder, read as ground/files.py reads: no symbolic link followed (a SKILL.md
    linked to a secret), regular files only (a FIFO would block), at most `limit` bytes; a refusal is a
    SkillFileError naming the file, with no byte of it."""
    try:
        return read_regular(root, rel, limit)
    except Refusal as exc:
        raise SkillFileError(rel, exc.reason.removeprefix(f"{rel}: "), kind=exc.kind) from None


def folder_digest(root: str | os.PathLike, with_usage: bool) -> str:
    """sha256 over every SKILL.md (path and content hash, walk order) and, `with_usage`, the usage sidecar:
    what a converted folder is pinned to. A refused file counts by its refusal, never by what it points at."""
    root = Path(root)
    digest = hashlib.sha256()
    rels = [p.relative_to(root).as_posix() for p in iter_skill_files(root)] + ([USAGE_FILE] if with_usage else [])
    for rel in rels:
        try:
            content = hashlib.sha256(read_in_folder(root, rel, MAX_DIGEST_BYTES)).digest()
        except SkillFileError as exc:
            content = exc.kind.encode()
        digest.update(rel.encode() + b"\0" + content)
    return digest.hexdigest()


def duplicate_name(doc: SkillFile, first: SkillFile) -> SkillFileError:
    return SkillFileError(doc.rel_path, f"duplicate skill name {doc.name!r} (also at {first.rel_path})",
                          field="name", kind="duplicate_name")


def read_skills(root: str | os.PathLike) -> tuple[list[SkillFile], list[SkillFileError]]:
    """Every skill of a folder once (the first of a duplicated name wins) and the files that were refused."""
    root = Path(root)
    skills: dict[str, SkillFile] = {}
    errors: list[SkillFileError] = []
    for p in iter_skill_files(root):
        rel = p.relative_to(root).as_posix()
        try:
            doc = read_skill_file(read_in_folder(root, rel, MAX_SKILL_BYTES), rel)
        except SkillFileError as exc:
            errors.append(exc)
            continue
        if doc.name in skills:
            errors.append(duplicate_name(doc, skills[doc.name]))
            continue
        skills[doc.name] = doc
    return list(skills.values()), errors


# -- provenance, categories, usage -----------------------------------------------------------------------------
def read_bundled_manifest(root: str | os.PathLike) -> dict[str, str]:
    """`.bundled_manifest`: one `name:md5hex` per line -> {name: md5}; {} when absent."""
    try:
        data = read_in_folder(root, ".bundled_manifest", SIDECAR_BYTES)
    except (OSError, SkillFileError):
        return {}
    return parse_bundled_manifest(data)


def parse_bundled_manifest(data: bytes) -> dict[str, str]:
    out = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, h = line.partition(":")
            out[name.strip()] = h.strip()
    return out


def read_hub_lock(root: str | os.PathLike) -> dict[str, dict]:
    """`.hub/lock.json` `installed`: {folder: entry}; {} when absent or unreadable."""
    try:
        data = read_in_folder(root, ".hub/lock.json", SIDECAR_BYTES)
    except (OSError, SkillFileError):
        return {}
    return parse_hub_lock(data)


def parse_hub_lock(data: bytes) -> dict[str, dict]:
    try:
        data = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return {}
    inst = data.get("installed") if isinstance(data, dict) else None
    return inst if isinstance(inst, dict) else {}


def provenance(name: str, folder: str, bundled: dict, hub: dict) -> tuple[str, dict | None]:
    """`hub` when the skill's folder (or name) is installed from the hub, `bundled` when its name is in the
    manifest, else `agent` (tools/skill_usage.py::provenance); with the hub entry when there is one."""
    for key in (folder, name):
        if key in hub:
            entry = hub[key]
            return "hub", entry if isinstance(entry, dict) else None
    return ("bundled" if name in bundled else "agent"), None


def skill_folder(doc: SkillFile) -> str:
    return PurePosixPath(doc.rel_path).parent.name


def category_key(rel_parts) -> str | None:
    """The category a `<category>/DESCRIPTION.md` (relative path parts) describes; None for the root's own."""
    return "/".join(rel_parts[:-1]) if len(rel_parts) >= 2 else None


def category_description(data: bytes) -> str:
    """A DESCRIPTION.md's text: its frontmatter `description:`, else the whole text. UnicodeDecodeError when
    it is not UTF-8."""
    text = data.decode("utf-8")
    try:
        fm, _ = parse_frontmatter(split_frontmatter(text, "DESCRIPTION.md")[0], "DESCRIPTION.md")
    except SkillFileError:
        fm = {}
    return fm["description"] if isinstance(fm.get("description"), str) else text.strip()


def read_usage(root: str | os.PathLike) -> dict[str, dict] | None:
    """The `.usage.json` sidecar, {name: record} with missing keys filled in; None when absent."""
    try:
        data = read_in_folder(root, USAGE_FILE, SIDECAR_BYTES)
    except FileNotFoundError:
        return None
    return parse_usage(data)


def parse_usage(data: bytes) -> dict[str, dict]:
    """`.usage.json` bytes -> {name: record} with missing keys filled in; SkillFileError when unreadable."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise SkillFileError(USAGE_FILE, f"not valid JSON: {exc}", kind="json_invalid") from None
    except RecursionError:
        raise SkillFileError(USAGE_FILE, "not valid JSON: nested too deeply", kind="too_deep") from None
    if not isinstance(obj, dict):
        raise SkillFileError(USAGE_FILE, "must be a JSON object keyed by skill name", kind="model_type")
    return {name: {**USAGE_DEFAULTS, **rec} for name, rec in sorted(obj.items()) if isinstance(rec, dict)}


# -- lake payloads ----------------------------------------------------------------------------------------------
def skill_payload(doc: SkillFile, prov: str) -> dict:
    """The `skills` table payload of one read skill (callers add their own `metadata`)."""
    return {"name": doc.name, "event_type": "skill.upsert", "category": doc.category, "path": doc.rel_path,
            "provenance": prov, "description": doc.description, "frontmatter": doc.frontmatter, "body": doc.body,
            "deleted": False}


def usage_problem(rec: dict) -> str | None:
    """Why a sidecar record's counters cannot be taken (Hermes only ever counts up from 0), or None."""
    for key in ("use_count", "view_count", "patch_count"):
        v = rec.get(key)
        if v is not None and (_int(v) is None or _int(v) < 0):
            return f"{key} must be a whole number >= 0, not {v!r}"
    return None


def _int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    return int(v) if isinstance(v, float) and v.is_integer() else None


def usage_payload(name: str, rec: dict) -> dict:
    """The `skill_usage` table payload of one sidecar record (absolute counters: a snapshot, not an increment)."""
    last = rec.get("last_used_at")
    return {"name": name, "use_count": _int(rec.get("use_count")), "view_count": _int(rec.get("view_count")),
            "patch_count": _int(rec.get("patch_count")), "last_used_at": last if isinstance(last, str) else None,
            "usage": rec}
