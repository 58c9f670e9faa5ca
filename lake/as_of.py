"""The one parser of snapshot pins: every spelling users type after --as-of, for every command and for
`Lake.snapshot`, so that `lake sql`, `lake export` and the trainers read the same text the same way."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Mapping, Union

from lake.errors import LakeError

# The file a dataset export writes beside its data; its `lake_versions` pin the snapshot it came from.
MANIFEST_NAME = "manifest.json"

# None (latest), a version for every table, {table: version}, or text / a path in one of parse_as_of's spellings.
AsOf = Union[int, Mapping[str, int], str, os.PathLike, None]


class AsOfError(LakeError):
    """An --as-of text that is none of the spellings below."""


def parse_as_of(as_of: AsOf) -> int | dict[str, int] | None:
    """None; `7` (every table at min(7, latest)); `trajectories=7,skills=2`; a JSON object {table: version};
    or a dataset folder / manifest.json, whose `lake_versions` reproduce the snapshot it was exported from."""
    if as_of is None or isinstance(as_of, int):
        return as_of
    if isinstance(as_of, Mapping):
        try:
            return {str(k): int(v) for k, v in as_of.items()}
        except (TypeError, ValueError) as exc:
            raise AsOfError(f"as-of versions must be integers: {exc}") from None
    text = os.fspath(as_of).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    if text.startswith("{"):
        try:
            return {str(k): int(v) for k, v in json.loads(text).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise AsOfError(f"--as-of {text!r} is not a JSON object of table versions: {exc}") from None
    path = Path(text)
    if path.is_dir():
        path = path / MANIFEST_NAME
    if path.is_file():
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            return {str(k): int(v) for k, v in manifest["lake_versions"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AsOfError(f"--as-of {text}: not a dataset manifest ({exc})") from None
    if "=" in text:
        pins = {}
        for part in text.split(","):
            table, _, version = part.partition("=")
            if not re.fullmatch(r"\d+", version.strip()):
                break
            pins[table.strip()] = int(version)
        else:
            return pins
    raise AsOfError(f"--as-of takes VERSION, TABLE=VERSION[,TABLE=VERSION], a JSON object or a manifest.json, "
                    f"not {text!r}")
