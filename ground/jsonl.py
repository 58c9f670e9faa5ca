"""JSON Lines input, the one reader of every wing: bounded, gzip-aware, and its errors name the file and the line.

`iter_lines` gives (line number, bytes) of each non-empty line of a file (or of one already open: the watcher and
`lake import` open theirs without following links, ground/files.py); a gzip file (multi-member, as `gzip -c a b`
writes) is read through, found by its magic bytes and not by its name. Bounded: a line longer than MAX_LINE_BYTES
(a gzip bomb of zeros, a binary file without a newline) is refused after at most that many bytes, and so is a file
that inflates past `max_bytes`; a line with NUL bytes is binary, not JSON. `read_jsonl` parses every line (a line
that is not JSON: invalid JSON, the line named). Every refusal is a `JsonlError` (a UserError: one line, exit 2)
with its `kind` (json_invalid, bad_gzip, too_large, binary), which a wing turns into its own error when it has one
(ingest's BadInput, envs' TaskFileError, a subclass). Used by `lake append`, `lake import` and the watcher, envs'
task files and the trainers' run logs and datasets.
"""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import orjson

from ground.errors import UserError

MAX_LINE_BYTES = 256 << 20  # one record; a longer "line" (a gzip bomb of zeros, a binary file) is refused
GZIP_MAGIC = b"\x1f\x8b"


class JsonlError(UserError, ValueError):
    """A JSON Lines file that cannot be read as one: `path`, 1-based `line` (0: the file as a whole), the field
    when one is known, the `kind` of refusal and (binary) the first bytes of the line."""

    def __init__(self, path: str, line: int, message: str, field: str | None = None, *, kind: str = "json_invalid",
                 data: bytes = b""):
        self.path, self.line, self.message, self.field, self.kind, self.data = path, line, message, field, kind, data
        where = f"{path}:{line}"
        super().__init__(f"{where}: field '{field}': {message}" if field else f"{where}: {message}")


def iter_lines(path: str | os.PathLike, *, max_bytes: int | None = None, fileobj: BinaryIO | None = None,
               error: type[JsonlError] = JsonlError) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-empty line of `path` (or of `fileobj`, open at its start; `path` then only
    names it), gzip read through; `error(path, line, message, kind=...)` for a truncated or corrupt gzip stream, a
    line past MAX_LINE_BYTES, a file inflating past `max_bytes` or a line with NUL bytes."""
    name = str(path)
    if fileobj is not None:
        gz = fileobj.read(2) == GZIP_MAGIC
        fileobj.seek(0)
        raw = gzip.GzipFile(fileobj=fileobj, mode="rb") if gz else fileobj
    else:
        with open(path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
        raw = gzip.open(path, "rb") if gz else open(path, "rb")
    lineno = total = 0
    limit = MAX_LINE_BYTES if max_bytes is None else min(MAX_LINE_BYTES, max_bytes)
    with raw as fh:
        while True:
            try:
                line = fh.readline(limit + 1)
            except EOFError:
                raise error(name, lineno + 1, "truncated gzip stream (the last member is incomplete)",
                            kind="bad_gzip") from None
            except (OSError, zlib.error) as exc:
                raise error(name, lineno + 1, f"corrupt gzip data: {exc}", kind="bad_gzip") from None
            if not line:
                return
            lineno += 1
            total += len(line)
            if len(line) > limit:
                raise error(name, lineno, f"line longer than {limit} bytes (inflated)", kind="too_large")
            if max_bytes is not None and total > max_bytes:
                raise error(name, lineno, f"file inflates past the limit of {max_bytes} bytes", kind="too_large")
            if b"\x00" in line:
                raise error(name, lineno, "binary data (NUL bytes): not a JSON lines file", kind="binary",
                            data=line[:200])
            if line.strip():
                yield lineno, line


def iter_records(path: str | os.PathLike, *, max_bytes: int | None = None, fileobj: BinaryIO | None = None,
                 error: type[JsonlError] = JsonlError) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-empty line (`iter_lines`); a line that is not JSON (or is nested
    deeper than orjson's limit) is `error(path, line, "invalid JSON (...)")`."""
    for lineno, line in iter_lines(path, max_bytes=max_bytes, fileobj=fileobj, error=error):
        try:
            yield lineno, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise error(str(path), lineno, f"invalid JSON ({exc})") from None


def read_jsonl(path: str | Path, *, max_bytes: int | None = None) -> tuple[list[Any], list[int]]:
    """All records of a JSON Lines file (plain or gzip) and the 1-based line number of each; blank lines skipped."""
    records, lines = [], []
    for lineno, rec in iter_records(path, max_bytes=max_bytes):
        records.append(rec)
        lines.append(lineno)
    return records, lines
