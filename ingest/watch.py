"""`lake watch`: a skills folder -> `skills`/`skill_usage` events, an inbox folder -> trajectories.

Each pass compares the folder with what the lake already says (loaded at start, so a restart reconciles
whatever changed while the watcher was down) and writes only differences. watchdog events just wake the loop
early; a file is acted on only once its size and mtime have been stable for `settle` seconds, so
half-written files wait. Editor temp files and dot-files are ignored.

The inbox takes only trajectory files by name, by one of two rules:
- `--inbox DIR`, a dedicated folder files are dropped into: every JSON-lines file (`INBOX_SUFFIXES`, plain or
  gzip); one that cannot be read is moved to `.rejected/` with its reason, since it was put there to be ingested.
- `--hermes-dir DIR`, the folder Hermes Agent runs in: only Hermes' own file names (`HERMES_NAMES`: it appends
  `trajectory_samples.jsonl` / `failed_trajectories.jsonl`, or `.jsonl.gz`, to the folder it runs in, and
  batch_runner writes `trajectories.jsonl` beside `checkpoint.json`), because the user's own files live there
  too: a `mydata.jsonl` beside them was moved to `.rejected/` when that folder was watched as an inbox. Any other
  JSON-lines file there stays where it is, said once.
Every other file (notes.md, scripts, `.json` documents) is left where it is; `lake import` reads `.json` files
when asked to.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path

import orjson

from ingest.errors import BadInput
from ingest.importer import ingest_file
from ingest.config import inflate_limit
from ingest.dedupe import trajectory_guard
from ingest.records import LAKE_ERRORS
from ingest.safe_files import open_file, read_file, read_optional
from ingest.skills import bad_input, parse_skill, parse_usage, skill_record
from ingest.util import canonical, text_hash
from lake import Lake
from lake.lake import process_writer_id
from lake.records import RecordError, validate_records
from lake.skill_files import (MAX_SKILL_BYTES, SIDECAR_BYTES, USAGE_FILE, category_description, category_key, duplicate_name,
                              iter_skill_files, parse_bundled_manifest, parse_hub_lock, provenance, usage_payload,
                              usage_problem)

log = logging.getLogger("lachesis.ingest.watch")

TEMP_SUFFIXES = ("~", ".tmp", ".temp", ".part", ".partial", ".swp", ".swx", ".swo", ".crdownload", ".lock",
                 ".download")
INBOX_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
# Hermes Agent's trajectory files (run_agent.py: trajectory_samples / failed_trajectories, newer versions with a
# suffix and .gz; batch_runner.py: trajectories.jsonl); docs/hermes-formats.md
HERMES_NAMES = re.compile(r"^(?:(?:trajectory_samples|failed_trajectories)[^/]*|trajectories)\.jsonl(?:\.gz)?$")
HERMES_NAMES_TEXT = "trajectory_samples*.jsonl, failed_trajectories*.jsonl (plain or .gz), trajectories.jsonl"


def is_temp(name: str) -> bool:
    n = name.lower()
    return (n.startswith((".", "#", "~")) or n.endswith(TEMP_SUFFIXES) or n == "4913" or ".tmp" in n
            or n.startswith(".~lock"))


def is_inbox_file(name: str) -> bool:
    """A file the inbox takes: a JSON-lines trajectory file that is not a dot-file or an editor temp file."""
    return name.lower().endswith(INBOX_SUFFIXES) and not is_temp(name)


def is_hermes_file(name: str) -> bool:
    """A file `--hermes-dir` takes: one of Hermes Agent's own trajectory file names."""
    return bool(HERMES_NAMES.match(name)) and not is_temp(name)


def _sig(p: Path):
    try:
        st = p.lstat()  # a symbolic link's own signature: the watcher never follows one
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)


class Backoff:
    """Retry times of files that failed for a reason that may pass (an I/O or lake error): the next pass, then
    after 1, 2, 4 ... 300 s; a changed file is tried at once. A failing file costs next to nothing while the
    others proceed."""

    def __init__(self, cap_s: float = 300.0):
        self.cap_s = cap_s
        self.state: dict[str, tuple] = {}  # key -> (sig, failures, not before)

    def ready(self, key: str, sig) -> bool:
        st = self.state.get(key)
        return st is None or st[0] != sig or time.monotonic() >= st[2]

    def failed(self, key: str, sig) -> int:
        """Count a failure; -> how many in a row (the caller logs the first and each power of two)."""
        prev = self.state.get(key)
        n = prev[1] + 1 if prev is not None and prev[0] == sig else 1
        self.state[key] = (sig, n, time.monotonic() + min(self.cap_s, 2.0 ** (n - 2)) if n > 1 else 0.0)
        return n

    def ok(self, key: str) -> None:
        self.state.pop(key, None)


class Stability:
    """Tracks file signatures; `stable(p)` is True once the signature held still for `settle` seconds."""

    def __init__(self, settle: float):
        self.settle = settle
        self.first: dict[str, tuple] = {}
        self.waiting = False

    def stable(self, p: Path):
        sig = _sig(p)
        if sig is None:
            self.first.pop(str(p), None)
            return None
        now = time.monotonic()
        prev = self.first.get(str(p))
        if prev is None or prev[0] != sig:
            self.first[str(p)] = (sig, now)
            if self.settle > 0:
                self.waiting = True
                return None
            return sig
        if now - prev[1] >= self.settle:
            return sig
        self.waiting = True
        return None


class Watcher:
    def __init__(self, lake: Lake, *, skills_dir: Path | None = None, inbox_dir: Path | None = None,
                 settle: float = 0.5, max_file_bytes: int = 256 << 20, inflate_ratio: float = 100.0,
                 writer_name: str = "ingest-watch", echo=None, hermes_dir: Path | None = None):
        self.lake = lake
        self.skills_dir = Path(skills_dir).resolve() if skills_dir else None
        if inbox_dir and hermes_dir:
            raise ValueError("one inbox: a dedicated folder (inbox_dir) or Hermes' working folder (hermes_dir)")
        # Hermes' folder is an inbox with a narrower rule: its own file names only (the module docstring)
        self.hermes_only = hermes_dir is not None
        self.inbox_dir = Path(inbox_dir or hermes_dir).resolve() if (inbox_dir or hermes_dir) else None
        self.left_alone: set[str] = set()  # JSON-lines files --hermes-dir does not take, each said once
        self.writer = lake.writer(process_writer_id(writer_name))
        self.stab = Stability(settle)
        self.max_file_bytes, self.inflate_ratio = max_file_bytes, inflate_ratio
        self.echo = echo or (lambda msg: log.info(msg))
        self.wake = threading.Event()
        self.stats = {"skill_upserts": 0, "skill_deletes": 0, "usage_events": 0, "files_done": 0,
                      "trajectories": 0, "duplicates": 0, "files_rejected": 0, "errors": 0, "passes": 0}
        self._parsed: dict[str, tuple] = {}  # path -> (sig, doc | BadInput, error key)
        self.backoff = Backoff()
        self._load_state()

    # -- state from the lake ---------------------------------------------------------------------------
    def _load_state(self):
        self.ids = trajectory_guard(self.lake).keys  # also checked at commit time (ingest.dedupe)
        self.skills: dict[str, dict] = {}
        self.usage: dict[str, str] = {}
        self.reported: set[str] = set()
        with self.lake.snapshot() as snap:
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
            for r in snap.arrow("SELECT json_extract_string(metadata, '$.key') AS k FROM ingest_errors").to_pylist():
                if r["k"]:
                    self.reported.add(r["k"])

    @staticmethod
    def _canon(v) -> str:
        if v is None:
            return ""
        return canonical(orjson.loads(v) if isinstance(v, str) else v).decode()

    def _error(self, path: str, exc: BadInput, key: str, extra: dict | None = None):
        if key in self.reported:
            return
        self.writer.append("ingest_errors", [exc.error_record(path, "watch", key=key, **(extra or {}))])
        self.reported.add(key)
        self.stats["errors"] += 1
        self.echo(f"error {path}: {exc.describe()}")

    def _fits(self, table: str, rec: dict, path: str, key: str) -> bool:
        """True when the lake takes `rec`; else its error is recorded (once per key) and the caller leaves it
        out, so one unstorable record (frontmatter or usage nested 300 deep) never fails the others' commit."""
        try:
            validate_records(table, [rec])
        except RecordError as exc:
            self._error(path, BadInput(exc.message, field=exc.field, kind="schema"), key)
            return False
        return True

    # -- skills ----------------------------------------------------------------------------------------
    def _sidecar(self, root: Path, rel: str) -> bytes | None:
        """A file next to the skills (manifest, hub lock, usage, DESCRIPTION.md): its bytes, or None when it is
        absent or refused (a link, not a regular file, too large, unreadable: recorded once, no bytes of it)."""
        try:
            return read_optional(root, rel, SIDECAR_BYTES)
        except BadInput as exc:
            self._error(str(root / rel), exc, f"refused:{rel}:{exc.kind}")
        except OSError as exc:
            self._error(str(root / rel), BadInput(f"cannot read {rel}: {exc.strerror}", kind="io"),
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

    def scan_skills(self) -> int:
        root = self.skills_dir
        if root is None or not root.is_dir():
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
                self._error(str(p), doc, key)
                continue
            if doc.name in on_disk:
                self._error(str(p), bad_input(duplicate_name(doc, on_disk[doc.name])), f"dup:{rel}:{doc.sha256}")
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
            self.writer.append("skills", events + deletes)
            for e in events:
                m = e["metadata"]
                self.skills[e["name"]] = {"sha256": m["sha256"], "provenance": e["provenance"], "path": e["path"],
                                          "category": e["category"], "root": m["root"]}
                self.echo(f"skill {e['name']} ({e['provenance']}, {e['category'] or '-'})")
            for d in deletes:
                self.skills.pop(d["name"], None)
                self.echo(f"skill {d['name']} deleted")
            self.stats["skill_upserts"] += len(events)
            self.stats["skill_deletes"] += len(deletes)
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
            self._error(str(p), exc, f"usage:{sig}")
            return 0
        recs = []
        for name, rec in sorted(usage.items()):
            try:
                c = canonical(rec).decode()
            except BadInput as exc:  # nested past what JSON storage takes: that entry is refused, once
                self._error(str(p), exc, f"usage:{name}:{sig}")
                continue
            if self.usage.get(name) == c:
                continue
            problem = usage_problem(rec)
            if problem:  # e.g. a negative use count: that entry is refused, the others are taken
                self._error(str(p), BadInput(problem, field=name, kind="value_error"), f"usage:{name}:{text_hash(c)}")
                continue
            r = usage_payload(name, rec)
            r["metadata"] = {"root": str(root)}
            if self._fits("skill_usage", r, str(p), f"usage:{name}:{text_hash(c)}"):
                recs.append((name, c, r))
        if recs:
            self.writer.append("skill_usage", [r for _, _, r in recs])
            for name, c, _ in recs:
                self.usage[name] = c
            self.stats["usage_events"] += len(recs)
            self.echo(f"usage: {len(recs)} skill(s) changed")
        return len(recs)

    # -- inbox -----------------------------------------------------------------------------------------
    def scan_inbox(self) -> int:
        inbox = self.inbox_dir
        if inbox is None or not inbox.is_dir():
            return 0
        n = 0
        for entry in sorted(os.scandir(inbox), key=lambda e: e.name):
            if not entry.is_file(follow_symlinks=False) or not is_inbox_file(entry.name):
                continue  # not a trajectory file: not ours to read or move
            if self.hermes_only and not is_hermes_file(entry.name):
                if entry.name not in self.left_alone:  # the user's own file beside Hermes': not ours to move
                    self.left_alone.add(entry.name)
                    self.echo(f"left {entry.name} where it is: not a Hermes trajectory file name ({HERMES_NAMES_TEXT}); "
                              f"to ingest it, drop it into an --inbox folder or run `lake import {entry.path}`")
                continue
            p = Path(entry.path)
            sig = self.stab.stable(p)
            if sig is None or not self.backoff.ready(entry.name, sig):
                continue
            n += 1
            try:
                # opened without following a link, and only as a regular file (ingest.safe_files): the entry
                # may have been swapped for a link or a FIFO since it was listed
                with open_file(inbox, entry.name) as (fh, st):
                    limit = inflate_limit(st.st_size, self.max_file_bytes, self.inflate_ratio)  # a gzip bomb stops
                    res = ingest_file(self.writer, p, ids=self.ids, max_bytes=limit, fileobj=fh)
            except (BadInput, RecursionError) as exc:
                if _sig(p) == sig:
                    self._reject(p, exc if isinstance(exc, BadInput) else
                                 BadInput("nested too deeply to read", kind="too_deep"))
                # else the file grew while it was read (Hermes appends to its files): read it again once stable
                continue
            except LAKE_ERRORS as exc:  # transient (disk, lake): back off this file, the others proceed
                k = self.backoff.failed(entry.name, sig)
                if k & (k - 1) == 0:  # the 1st, 2nd, 4th... failure in a row
                    log.warning("cannot ingest %s now (%d failure(s) in a row): %s", p, k, exc)
                continue
            self.backoff.ok(entry.name)
            self.stats["trajectories"] += res.appended
            self.stats["duplicates"] += res.duplicates
            self.echo(f"inbox {p.name}: {res.appended} trajectories ({res.format}), "
                      f"{res.duplicates} duplicate(s)")
            if _sig(p) != sig:
                continue  # appended to while it was read: the next pass reads it whole (ids skip what is in)
            self._move(p, inbox / ".done")
            self.stats["files_done"] += 1
        return n

    def _move(self, p: Path, dest_dir: Path) -> Path:
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / p.name
        k = 1
        while dest.exists():
            dest = dest_dir / f"{p.name}.{k}"
            k += 1
        shutil.move(str(p), str(dest))
        self.stab.first.pop(str(p), None)
        return dest

    def _reject(self, p: Path, exc: BadInput):
        dest = self._move(p, self.inbox_dir / ".rejected")
        lines = [f"file: {p.name}", f"reason: {exc.reason}"]
        if exc.line is not None:
            lines.append(f"line: {exc.line}")
        if exc.field is not None:
            lines.append(f"field: {exc.field_str()}")
        lines.append(f"error: {exc.describe()}")
        Path(str(dest) + ".error.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.stats["files_rejected"] += 1
        self._error(str(p), exc, f"inbox:{dest.name}:{time.time_ns()}", {"moved_to": str(dest)})

    # -- loop ------------------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line for `lake watch --once`: what the passes so far changed, per watched folder."""
        st, parts = self.stats, []
        if self.skills_dir is not None:
            parts.append(f"skills: {st['skill_upserts']} version(s) written, {st['skill_deletes']} deleted, "
                         f"{st['usage_events']} usage change(s)")
        if self.inbox_dir is not None:
            parts.append(f"inbox: {st['files_done']} file(s) ingested ({st['trajectories']} trajectories, "
                         f"{st['duplicates']} duplicate(s)), {st['files_rejected']} rejected")
        if self.left_alone:
            parts.append(f"{len(self.left_alone)} other .jsonl file(s) left where they are (not Hermes' names)")
        if st["errors"]:
            parts.append(f"{st['errors']} error(s) recorded in ingest_errors")
        return "; ".join(parts)

    def scan(self) -> int:
        self.stab.waiting = False
        n = self.scan_skills() + self.scan_inbox()
        self.stats["passes"] += 1
        return n

    def run(self, stop: threading.Event, interval: float = 2.0) -> None:
        observer = _start_observer([d for d in (self.skills_dir, self.inbox_dir) if d is not None], self.wake,
                                   interval)
        try:
            while not stop.is_set():
                try:
                    self.scan()
                except LAKE_ERRORS:  # never die on one bad pass (a lake hiccup): log and try again
                    log.exception("watch pass failed")
                timeout = min(self.stab.settle / 2 or 0.05, interval) if self.stab.waiting else interval
                self.wake.wait(timeout)
                self.wake.clear()
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=2)


def _start_observer(dirs: list[Path], wake: threading.Event, interval: float):
    """A watchdog observer that sets `wake` on any change under `dirs`; None (poll only) without watchdog
    (an optional dependency, the `server` extra) or when the OS refuses more watches."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError as exc:
        log.warning("watchdog unavailable (%s); polling every %.1fs", exc, interval)
        return None

    class Wake(FileSystemEventHandler):
        def on_any_event(self, event):
            wake.set()

    observer = Observer()
    try:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            observer.schedule(Wake(), str(d), recursive=True)
        observer.start()
    except OSError as exc:  # e.g. the inotify watch limit
        log.warning("cannot watch (%s); polling every %.1fs", exc, interval)
        return None
    return observer
