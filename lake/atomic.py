"""Crash-safe small files: write a temp file in the same directory, fsync, then os.replace."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import orjson


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2))


def read_json(path: Path) -> Any:
    return orjson.loads(Path(path).read_bytes())
