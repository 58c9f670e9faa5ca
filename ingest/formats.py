"""Trajectory files and bodies: reading (.jsonl, multi-member .jsonl.gz, .json), format detection, parsing.

Formats: `hermes` (ShareGPT `conversations`, CLI and batch-runner shapes), `atropos` (ScoredDataGroup JSONL
as written by `--env.data_path_to_save_groups`), `native` (lake trajectory records; OpenAI-style `messages`
are accepted). Everything is parsed before anything is written, so a bad line rejects the whole file.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import orjson
from pydantic import ValidationError

from edge.errors import BadInput, TooLarge
from ground import jsonl
from ground.ids import uuid7
from ingest import atropos as A
from ingest.config import FORMATS
from ingest.groups import ParsedGroup, parse_group
from ingest.hermes import hermes_to_record, is_hermes_record
from ingest.messages import lake_messages
from ingest.util import excerpt, loads, stable_hash, text_hash

TRAJECTORY_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz")


def detect_record(rec) -> str:
    if not isinstance(rec, dict):
        raise BadInput("a record must be a JSON object", kind="model_type")
    if is_hermes_record(rec):
        return "hermes"
    if "trajectory_id" in rec:
        return "native"
    toks = rec.get("tokens")
    if "tokens" in rec and ("scores" in rec or "masks" in rec) and not (
            isinstance(toks, list) and toks and isinstance(toks[0], (int, float))):
        return "atropos"
    if "messages" in rec or "trajectory_id" in rec:
        return "native"
    raise BadInput("unknown record format: expected Hermes 'conversations', an Atropos group "
                   "('tokens', 'masks', 'scores') or a native record ('trajectory_id', 'messages')",
                   kind="unknown_format")


def native_to_record(rec: dict, *, source_path: str | None = None) -> dict:
    """A native (or OpenAI-messages) record -> a lake trajectory record; messages normalised."""
    if not isinstance(rec, dict):
        raise BadInput("a record must be a JSON object", kind="model_type")
    if "messages" not in rec:
        raise BadInput("field required", field=["messages"], kind="missing")
    msgs, lossy = lake_messages(rec["messages"], ["messages"])
    out = dict(rec)
    out["messages"] = msgs
    tid = rec.get("trajectory_id")
    if tid is None:
        out["trajectory_id"] = "native-" + stable_hash(rec)
    elif not isinstance(tid, str) or not tid.strip():
        raise BadInput("trajectory_id must be a non-empty string", field=["trajectory_id"])
    elif len(tid) > 512:
        raise BadInput("trajectory_id is longer than 512 characters", field=["trajectory_id"])
    if lossy and "raw" not in rec:
        out["raw"] = {"messages": rec["messages"]}
    if source_path:
        meta = rec.get("metadata")
        if meta is None or isinstance(meta, dict):
            out["metadata"] = {**(meta or {}), "source_path": source_path}
    return out


def atropos_to_records(obj, *, group_id: str | None = None, source_path: str | None = None,
                       env_name: str | None = None) -> tuple[ParsedGroup, list[dict]]:
    """An Atropos group (a file line, a record of a request) -> (the parsed group, its lake records)."""
    try:
        pg = parse_group(obj, [])
    except ValidationError as exc:
        d = A.validation_detail(exc, prefix=())[0]
        raise BadInput(d["msg"], field=d["loc"], kind=d["type"]) from None
    table = pg.table(group_id=group_id or uuid7(), env_name=env_name, qseq=uuid7(), source_path=source_path)
    # not "atropos.group": only groups posted to /scored_data enter (and are restored into) the trainer queue
    return pg, [{**r, "event_type": "atropos.import"} for r in table.to_pylist()]


def to_records(rec, fmt: str, *, source_path: str | None = None, line: int | None = None,
               keyed: tuple[str, int] | None = None) -> list[dict]:
    """One record of a file or a request body -> lake trajectory records.

    Ids (the rule `lake import` and POST /v1/trajectories share): the record's own `trajectory_id`, else one
    derived from its content (Hermes, native); an Atropos group's from its content and its `line` (a 1-based
    line or array position), since identical groups on two lines are two samples. `keyed` (a request's
    Idempotency-Key and the item's position): a native record without its own id and an Atropos group take
    theirs from the key and the position instead (a Hermes record keeps its content-derived id).
    """
    if fmt == "auto":
        fmt = detect_record(rec)
    if fmt == "hermes":
        return [hermes_to_record(rec, source_path=source_path)]
    if fmt == "atropos":
        # content and position: identical groups on two lines are two samples, the same line twice is one
        gid = ("idem-" + text_hash(f"{keyed[0]}#{keyed[1]}") if keyed
               else "atropos-" + stable_hash({"line": line, "group": rec}))
        return atropos_to_records(rec, source_path=source_path, group_id=gid)[1]
    if fmt == "native":
        if keyed and isinstance(rec, dict) and rec.get("trajectory_id") is None:
            rec = {**rec, "trajectory_id": f"idem-{text_hash(keyed[0])}:{keyed[1]}"}
        return [native_to_record(rec, source_path=source_path)]
    raise BadInput(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


# ----------------------------------------------------------------------------------------------------------
# reading files
# ----------------------------------------------------------------------------------------------------------
def iter_lines(path: str | os.PathLike, *, max_bytes: int | None = None,
               fileobj: BinaryIO | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-empty line: ground/jsonl.py's one reader (gzip, multi-member, detected by
    magic bytes; bounded lines and inflated size), its refusals as the ingest wing's BadInput naming the line (a
    line or a file too large: TooLarge). `fileobj`: the file already open at its start (the watcher opens it
    without following links, ingest.safe_files)."""
    try:
        yield from jsonl.iter_lines(path, max_bytes=max_bytes, fileobj=fileobj)
    except jsonl.JsonlError as exc:
        if exc.kind == "too_large":
            raise TooLarge(exc.message, line=exc.line) from None
        raise BadInput(exc.message, line=exc.line, kind=exc.kind,
                       excerpt=excerpt(exc.data) if exc.data else None) from None


@dataclass
class ParsedFile:
    path: str
    fmt: str
    records: list[dict] = field(default_factory=list)
    record_lines: list[int] = field(default_factory=list)  # the line of each record (an error names it)
    lines: int = 0


def parse_file(path: str | os.PathLike, fmt: str = "auto", *, max_bytes: int | None = None,
               progress=None, fileobj: BinaryIO | None = None) -> ParsedFile:
    """Parse a whole trajectory file into native records (all or nothing: BadInput names the line)."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    p = Path(path)
    name = p.name.lower()
    out = ParsedFile(str(p), fmt)
    detected = None if fmt == "auto" else fmt
    whole_json = name.endswith((".json", ".json.gz"))
    if whole_json:
        data = b"".join(line for _, line in iter_lines(p, max_bytes=max_bytes, fileobj=fileobj))
        doc = loads(data, line=1)
        items = doc if isinstance(doc, list) else [doc]
        enum = [(1, it) for it in items]
    else:
        enum = None
    source = str(p)

    def handle(lineno, rec):
        nonlocal detected
        try:
            f = detect_record(rec) if detected is None else detected
            if detected is None:
                detected = f
            elif fmt == "auto":
                f2 = detect_record(rec)
                if f2 != detected:
                    raise BadInput(f"record format {f2} differs from the file's format {detected}")
            recs = to_records(rec, f, source_path=source, line=lineno)
            out.records.extend(recs)
            out.record_lines.extend([lineno] * len(recs))
        except BadInput as exc:
            raise exc.with_line(lineno) from None

    if enum is not None:
        for k, (lineno, rec) in enumerate(enum):
            handle(k + 1, rec)
            out.lines += 1
    else:
        for lineno, line in iter_lines(p, max_bytes=max_bytes, fileobj=fileobj):
            rec = loads(line, line=lineno)
            handle(lineno, rec)
            out.lines = lineno
            if progress is not None:
                progress(len(line))
    if not out.records:
        raise BadInput("the file holds no records", line=out.lines or None, kind="empty")
    out.fmt = detected or fmt
    return out


def parse_body(data: bytes, content_type: str | None = None) -> list:
    """A request body: one JSON object, a JSON array, or NDJSON -> list of (line, object)."""
    stripped = data.strip()
    if not stripped:
        raise BadInput("empty body", kind="missing")
    if b"\x00" in data:
        raise BadInput("binary data (NUL bytes) in a JSON body", kind="binary")
    ct = (content_type or "").lower()
    if "ndjson" in ct or "jsonl" in ct or (stripped[:1] == b"{" and b"\n" in stripped and _looks_ndjson(stripped)):
        out = []
        for i, line in enumerate(io.BytesIO(data), 1):
            if line.strip():
                out.append((i, loads(line, line=i)))
        return out
    doc = loads(stripped)
    if isinstance(doc, list):
        return [(None, d) for d in doc]
    return [(None, doc)]


def _looks_ndjson(data: bytes) -> bool:
    try:
        orjson.loads(data)
        return False
    except orjson.JSONDecodeError:
        first = data.split(b"\n", 1)[0]
        try:
            orjson.loads(first)
            return True
        except orjson.JSONDecodeError:
            return False
