"""JSON Lines input with line numbers, for error messages that point at the line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ground.errors import UserError


class JsonlError(UserError, ValueError):
    def __init__(self, path: str, line: int, message: str, field: str | None = None):
        self.path, self.line, self.message, self.field = path, line, message, field
        where = f"{path}:{line}"
        super().__init__(f"{where}: field '{field}': {message}" if field else f"{where}: {message}")


def parse_jsonl(data: bytes, path: str = "<input>") -> tuple[list[Any], list[int]]:
    """All records of a JSONL document and the 1-based line number of each; blank lines are skipped."""
    records, lines = [], []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise JsonlError(path, number, f"invalid JSON ({exc})") from None
        lines.append(number)
    return records, lines


def read_jsonl(path: str | Path) -> tuple[list[Any], list[int]]:
    return parse_jsonl(Path(path).read_bytes(), str(path))
