"""`lake watch --skills DIR`: a Hermes skills folder mirrored into the lake's `skills` and `skill_usage` tables.

Each pass compares the folder with what the lake already says (loaded at start, so a restart reconciles whatever
changed while the watcher was down) and writes only differences: a new or changed SKILL.md is a new skill version,
a removed one a `skill.delete` event, a changed entry of `.usage.json` a usage event. A SKILL.md is read once its
signature settled (settling.py) and parsed once per signature; one that cannot be parsed keeps the last good
version in the lake and its error is recorded once (watch_journal.py). Provenance comes from the folder's
`.bundled_manifest` and `.hub/lock.json`, category descriptions from DESCRIPTION.md (lake/skill_files.py).
"""
from __future__ import annotations

from pathlib import Path

import orjson

from edge.errors import BadInput
from ingest.safe_files import read_file, read_optional
from ingest.settling import Stability
from ingest.skills import bad_input, parse_skill, parse_usage, skill_record
from ingest.util import canonical, text_hash
from ingest.watch_journal import Journal
from lake import Lake
from lake.records import RecordError, validate_records
from lake.skill_files import (MAX_SKILL_BYTES, SIDECAR_BYTES, USAGE_FILE, category_description, category_key, duplicate_name,
                              iter_skill_files, parse_bundled_manifest, parse_hub_lock, provenance, usage_payload,
                              usage_problem)


class SkillsMirror:
    """The skills folder `folder` mirrored into `lake` through `journal`'s writer; `scan()` is one pass."""

    def __init__(self, lake: Lake, folder: Path, journal: Journal, stab: Stability):
        self.folder = Path(folder).resolve()
        self.journal = journal
        self.stab = stab
        self._parsed: dict[str, tuple] = {}  # path -> (sig, doc | BadInput, error key)
        self.skills: dict[str, dict] = {}  # name -> what the lake says of its current version
        self.usage: dict[str, str] = {}  # name -> its usage entry, canonical JSON
        with lake.snapshot() as snap:
            rows = snap.arrow("SELECT name, category, path, provenance, deleted, metadata FROM skills "
                              "ORDER BY occurred_at, event_id").to_pylist()  # as views/skills_current.sql
            for r in rows:
                meta = orjson.loads(r["metadata"]) if r["metadata"] else {}
                if r["deleted"]:
                    self.skills.pop(r["name"], None)
                else:
                    self.skills[r["name"]] = {"sha256": meta.get("sha256"), "provenance": r["provenance"],
                                              "path": r["path"], "category": r["category"], "root": meta.get("root")}
            for r in snap.arrow("SELECT name, usage FROM skill_usage ORDER BY occurred_at, event_id").to_pylist():
                self.usage[r["name"]] = self._canon(r["usage"])

    @staticmethod
    def _canon(v) -> str:
        if v is None:
            return ""
        return canonical(orjson.loads(v) if isinstance(v, str) else v).decode()

    def _fits(self, table: str, rec: dict, path: str, key: str) -> bool:
        """True when the lake takes `rec`; else its error is recorded (once per key) and the caller leaves it
        out, so one unstorable record (frontmatter or usage nested 300 deep) never fails the others' commit."""
        try:
            validate_records(table, [rec])
        except RecordError as exc:
            self.journal.error(path, BadInput(exc.message, field=exc.field, kind="schema"), key)
            return False
        return True

    def _sidecar(self, root: Path, rel: str) -> bytes | None:
        """A file next to the skills (manifest, hub lock, usage, DESCRIPTION.md): its bytes, or None when it is
        absent or refused (a link, not a regular file, too large, unreadable: recorded once, no bytes of it)."""
        try:
            return read_optional(root, rel, SIDECAR_BYTES)
        except BadInput as exc:
            self.journal.error(str(root / rel), exc, f"refused:{rel}:{exc.kind}")
        except OSError as exc:
            self.journal.error(str(root / rel), BadInput(f"cannot read {rel}: {exc.strerror}", kind="io"),
                        f"io:{rel}:{exc.errno}")
        return None

    def _skill_doc(self, root: Path, rel: str, sig):
        """The SKILL.md at `rel` parsed (cached per signature) -> (SkillFile | BadInput, error key), or None when
        it vanished. A refused file is never read, so its error carries no bytes of it."""
        cached = self._parsed.get(rel)
        if cached is not None and cached[0] == sig:
            return cached[1:]
        try:
            data = read_file(root, rel, MAX_SKILL_BYTES)
        except FileNotFoundError:
            return None
        except BadInput as exc:  # a link, a FIFO, a device, too large
            doc, key = exc, f"refused:{rel}:{exc.kind}"
        except OSError as exc:
            doc, key = BadInput(f"cannot read: {exc.strerror}", kind="io"), f"io:{rel}:{exc.errno}"
        else:
            try:
                doc = parse_skill(data, rel)
                key = None
            except BadInput as exc:
                doc, key = exc, f"skill:{rel}:{text_hash(data)}"
                exc.excerpt = data[:200].decode("utf-8", "replace")  # a regular file inside the folder
        self._parsed[rel] = (sig, doc, key)
        return doc, key

    def scan(self) -> int:
        """One pass: the skills, then the usage file; -> how many events it wrote."""
        root = self.folder
        if not root.is_dir():
            return 0
        bundled = parse_bundled_manifest(self._sidecar(root, ".bundled_manifest") or b"")
        hub = parse_hub_lock(self._sidecar(root, ".hub/lock.json") or b"{}")
        cats: dict[str, str] = {}
        on_disk: dict[str, object] = {}  # name -> doc
        present_paths = set()
        unstable_paths = set()
        events = []
        for p in iter_skill_files(root, ("SKILL.md", "DESCRIPTION.md")):
            rel = p.relative_to(root).as_posix()
            if p.name == "DESCRIPTION.md":
                cat = category_key(p.relative_to(root).parts)
                data = self._sidecar(root, rel) if cat else None
                if data is not None:
                    try:
                        cats[cat] = category_description(data)
                    except UnicodeDecodeError:
                        pass
                continue
            present_paths.add(rel)
            sig = self.stab.stable(p)
            got = self._skill_doc(root, rel, sig) if sig is not None else None
            if got is None:
                unstable_paths.add(rel)
                continue
            doc, key = got
            if isinstance(doc, BadInput):
                self.journal.error(str(p), doc, key)
                continue
            if doc.name in on_disk:
                self.journal.error(str(p), bad_input(duplicate_name(doc, on_disk[doc.name])), f"dup:{rel}:{doc.sha256}")
                continue
            on_disk[doc.name] = doc
        for name, doc in on_disk.items():
            folder = Path(doc.rel_path).parent.name
            prov, hub_entry = provenance(name, folder, bundled, hub)
            cat_desc = cats.get(doc.category) if doc.category else None
            cur = self.skills.get(name)
            want = {"sha256": doc.sha256, "provenance": prov, "path": doc.rel_path, "category": doc.category,
                    "root": str(root)}
            if cur == want:
                continue
            rec = skill_record(doc, root=root, prov=prov, hub_entry=hub_entry, category_description=cat_desc)
            if self._fits("skills", rec, str(root / doc.rel_path), f"record:{doc.rel_path}:{doc.sha256}"):
                events.append(rec)
        deletes = []
        for name, cur in list(self.skills.items()):
            if cur.get("root") != str(root) or name in on_disk:
                continue
            if cur["path"] in unstable_paths:
                continue  # being rewritten: wait
            if cur["path"] in present_paths:
                # the file is still there but now invalid or renamed to another skill name
                doc = self._parsed.get(cur["path"], (None, None))[1]
                if isinstance(doc, BadInput):
                    continue  # keep the last good version; the error is reported
            deletes.append({"name": name, "event_type": "skill.delete", "category": cur.get("category"),
                            "path": cur["path"], "provenance": cur.get("provenance"), "deleted": True,
                            "metadata": {"root": str(root), "sha256": cur.get("sha256")}})
        for rel in list(self._parsed):
            if rel not in present_paths:
                del self._parsed[rel]
        if events or deletes:
            self.journal.writer.append("skills", events + deletes)
            for e in events:
                m = e["metadata"]
                self.skills[e["name"]] = {"sha256": m["sha256"], "provenance": e["provenance"], "path": e["path"],
                                          "category": e["category"], "root": m["root"]}
                self.journal.echo(f"skill {e['name']} ({e['provenance']}, {e['category'] or '-'})")
            for d in deletes:
                self.skills.pop(d["name"], None)
                self.journal.echo(f"skill {d['name']} deleted")
            self.journal.stats["skill_upserts"] += len(events)
            self.journal.stats["skill_deletes"] += len(deletes)
        n = len(events) + len(deletes)
        n += self.scan_usage(root)
        return n

    def scan_usage(self, root: Path) -> int:
        p = root / USAGE_FILE
        sig = self.stab.stable(p)
        if sig is None:
            return 0
        data = self._sidecar(root, USAGE_FILE)
        if data is None:
            return 0
        try:
            usage = parse_usage(data)
        except BadInput as exc:
            self.journal.error(str(p), exc, f"usage:{sig}")
            return 0
        recs = []
        for name, rec in sorted(usage.items()):
            try:
                c = canonical(rec).decode()
            except BadInput as exc:  # nested past what JSON storage takes: that entry is refused, once
                self.journal.error(str(p), exc, f"usage:{name}:{sig}")
                continue
            if self.usage.get(name) == c:
                continue
            problem = usage_problem(rec)
            if problem:  # e.g. a negative use count: that entry is refused, the others are taken
                self.journal.error(str(p), BadInput(problem, field=name, kind="value_error"), f"usage:{name}:{text_hash(c)}")
                continue
            r = usage_payload(name, rec)
            r["metadata"] = {"root": str(root)}
            if self._fits("skill_usage", r, str(p), f"usage:{name}:{text_hash(c)}"):
                recs.append((name, c, r))
        if recs:
            self.journal.writer.append("skill_usage", [r for _, _, r in recs])
            for name, c, _ in recs:
                self.usage[name] = c
            self.journal.stats["usage_events"] += len(recs)
            self.journal.echo(f"usage: {len(recs)} skill(s) changed")
        return len(recs)
