"""The one parser of snapshot pins: every spelling users type after --as-of, for every command and for
`Lake.snapshot`, so that `lake sql`, `lake export` and the trainers read the same text the same way."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from pathlib import Path
from typing import Mapping, Union

from lake.errors import LakeError

# The file a dataset export writes beside its data; its `lake_versions` pin the snapshot it came from.
MANIFEST_NAME = "manifest.json"

# None (latest), a version for every table, {table: version}, a time (every table as it was then), or text / a path
# in one of parse_as_of's spellings.
AsOf = Union[int, Mapping[str, int], dt.datetime, str, os.PathLike, None]
# an ISO 8601 date or time: 2026-12-01, 2026-12-01T10:00, 2026-12-01 10:00:00.5+02:00, ...Z
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?(Z|[+-]\d{2}:?\d{2})?")


class AsOfError(LakeError):
    """An --as-of text that is none of the spellings below."""


def parse_as_of(as_of: AsOf, *, files: bool = True) -> int | dict[str, int] | dt.datetime | None:
    """None; `7` (every table at min(7, latest)); `trajectories=7,skills=2`; a JSON object {table: version};
    an ISO 8601 time (`2026-12-01T10:00:00Z`; UTC without an offset, a date is its midnight): every table at its
    newest version committed at or before it (TableSet.resolve_versions);
    or a dataset folder / manifest.json, whose `lake_versions` reproduce the snapshot it was exported from.
    A version is a whole number 0..MAX_VERSION (JSON `7.0` is 7; `1e999`, `7.5`, `true` or a negative are
    AsOfErrors: `int(float("inf"))` was an OverflowError traceback).
    `files=False`: text is never a path (a pin a web client sends must not make the server read its files)."""
    if as_of is None:
        return as_of
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        return _version(as_of, "--as-of")
    if isinstance(as_of, Mapping):
        return _versions(as_of, "as-of")
    if isinstance(as_of, dt.datetime):
        return as_utc(as_of)
    text = os.fspath(as_of).strip()
    if re.fullmatch(r"\d+", text):
        return _version(text, "--as-of")  # as text: 5000 digits are an AsOfError, not int()'s ValueError
    if _TIME.fullmatch(text):
        try:
            return as_utc(dt.datetime.fromisoformat(text))
        except ValueError as exc:
            raise AsOfError(f"--as-of {text!r} is not a time: {exc}") from None
    if text.startswith("{"):
        try:
            pins = json.loads(text)
        except ValueError as exc:
            raise AsOfError(f"--as-of {text!r} is not a JSON object of table versions: {exc}") from None
        if not isinstance(pins, dict):
            raise AsOfError(f"--as-of {text!r} is not a JSON object of table versions")
        return _versions(pins, "--as-of")
    path = Path(text)
    if files and _is(path, Path.is_dir):
        path = path / MANIFEST_NAME
    if files and _is(path, Path.is_file):
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            pins = manifest["lake_versions"]
        except (ValueError, KeyError, TypeError) as exc:
            raise AsOfError(f"--as-of {text}: not a dataset manifest ({exc})") from None
        if not isinstance(pins, dict):
            raise AsOfError(f"--as-of {text}: not a dataset manifest (lake_versions is not an object)")
        return _versions(pins, f"--as-of {text}: lake_versions")
    if "=" in text:
        pins = {}
        for part in text.split(","):
            table, _, version = part.partition("=")
            if not re.fullmatch(r"\d+", version.strip()):
                break
            pins[table.strip()] = _version(version.strip(), f"--as-of {table.strip()}")
        else:
            return pins
    manifest = " or a manifest.json" if files else ""
    raise AsOfError(f"--as-of takes VERSION, TABLE=VERSION[,TABLE=VERSION], a JSON object, an ISO 8601 time"
                    f"{manifest}, not {text[:80]!r}")


def _is(path: Path, test) -> bool:
    """`test(path)`, False for a text no file can be named (too long: is_dir raises OSError, not False)."""
    try:
        return test(path)
    except OSError:
        return False


def as_utc(when: dt.datetime) -> dt.datetime:
    """A time in UTC; one without an offset is read as UTC (what the lake's commit times are). The read API's
    time filters (ui/params.py) read times the same way."""
    return when.astimezone(dt.timezone.utc) if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


# Far above any lake's commit count (a commit a millisecond for 30 years is 10**12), far below what delta-rs
# takes (a u64/i64): a larger pin is a typo or an attack, refused before it reaches a reader.
MAX_VERSION = 10**15


def _versions(pins: Mapping, where: str) -> dict[str, int]:
    return {str(table): _version(v, f"{where} {table}") for table, v in pins.items()}


def _version(value: object, where: str) -> int:
    """One table version: an int, a whole finite float (JSON 7.0) or a digit string; else a one-line AsOfError."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d{1,18}\s*", value):
        number = int(value)
    else:
        number = None
    if number is None or not 0 <= number <= MAX_VERSION:
        shown = repr(value) if not isinstance(value, str) else repr(value[:40])
        raise AsOfError(f"{where}: a version is a whole number 0..{MAX_VERSION}, not {shown}")
    return number
