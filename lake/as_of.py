"""The spellings of a snapshot pin that users type after --as-of."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"


class AsOfError(ValueError):
    pass


def parse_as_of(as_of: Any) -> int | dict[str, int] | None:
    """None; `7` (every table at min(7, latest)); `trajectories=7,skills=2`; a JSON object {table: version};
    or a dataset folder / manifest.json, whose `lake_versions` reproduce the snapshot it was exported from."""
    if as_of is None or isinstance(as_of, int):
        return as_of
    if isinstance(as_of, dict):
        return {str(k): int(v) for k, v in as_of.items()}
    text = str(as_of).strip()
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
