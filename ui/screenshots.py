"""A web episode's screenshot, shown inline on its conversation page from inside the folder `lake ui --screenshots`
names, and nowhere else.

web_form_env saves the page as the episode ends as a PNG in its screenshots folder and records the file's absolute
path in the final checks (envs/web/env.py `final_report`), which the row builder keeps in the row's metadata:
`metadata.checks.details[0].screenshot` (transcript/recorder.py). That path is data any writer of the lake chose, so
it is only ever a name to look up inside the screenshots folder (`locate`, one check for the page and the route):
joined to the folder (an absolute path stays itself), every link and `..` resolved, and then it must lie inside the
folder (resolved too), end in `.png`, and be a regular file. The route `GET /ui/screenshots/{path}` (the path
relative to the folder) runs the same check, then reads the file without following a link on the way
(ground.files.read_regular from the resolved folder: a component swapped for a link meanwhile is refused), at most
MAX_BYTES, and only if it starts with the PNG signature; it answers image/png. Anything else is a 404 (absent, or
no folder given) or a 403 (outside the folder, not a PNG), and the page shows the recorded path as text and why.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ground.files import Refusal, read_regular

MAX_BYTES = 16 << 20  # a full-page PNG of a MiniWoB task is ~20 KB; a desktop screenshot a few MB
MAX_SHOTS = 8  # screenshots taken from one row's checks
MAX_PATH_CHARS = 4096
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NO_FOLDER = "not shown: the server was given no screenshots folder (lake ui --screenshots FOLDER)"


@dataclass(frozen=True)
class Shot:
    """A screenshot a row records: its path as recorded, and either `rel` (the path inside the folder the route
    serves) or `why` it is not shown."""

    recorded: str
    rel: str | None
    why: str | None
    status: int = 200  # what the route answers for it: 404 absent or off, 403 refused


def recorded(row: dict[str, Any]) -> list[str]:
    """The screenshot paths of a row's checks (`metadata.checks.details[*].screenshot`), at most MAX_SHOTS."""
    meta = row.get("metadata")
    checks = meta.get("checks") if isinstance(meta, dict) else None
    details = checks.get("details") if isinstance(checks, dict) else None
    out = []
    for d in details if isinstance(details, list) else []:
        shot = d.get("screenshot") if isinstance(d, dict) else None
        if isinstance(shot, str) and shot:
            out.append(shot)
            if len(out) >= MAX_SHOTS:
                break
    return out


def locate(folder: str | os.PathLike | None, path: str) -> Shot:
    """`path` (recorded in the lake, or asked of the route: relative to `folder` or absolute) checked against the
    screenshots `folder` (None: none given)."""
    if folder is None:
        return Shot(path, None, NO_FOLDER, 404)
    if len(path) > MAX_PATH_CHARS or "\0" in path:
        return Shot(path, None, "not a path", 403)
    try:
        root = Path(folder).resolve(strict=True)
        full = (root / path).resolve()  # every link and `..` resolved before the check
    except (OSError, RuntimeError, ValueError) as exc:  # a loop of links, an absent folder
        return Shot(path, None, f"not resolved: {getattr(exc, 'strerror', None) or exc}", 404)
    if not full.is_relative_to(root):
        return Shot(path, None, f"refused: not inside the screenshots folder {root}", 403)
    if full.suffix.lower() != ".png":
        return Shot(path, None, "refused: not a .png file", 403)
    if not full.is_file():
        return Shot(path, None, "not shown: no such file in the screenshots folder", 404)
    return Shot(path, full.relative_to(root).as_posix(), None)


def read(folder: str | os.PathLike | None, path: str) -> tuple[bytes | None, Shot]:
    """(the PNG's bytes, or None; the check's answer, whose `status` and `why` say why not)."""
    shot = locate(folder, path)
    if shot.rel is None:
        return None, shot
    root = Path(folder).resolve()  # type: ignore[arg-type]  (locate answered: a folder was given)
    try:
        data = read_regular(root, shot.rel, MAX_BYTES)
    except Refusal as exc:
        return None, Shot(path, None, f"refused: {exc.reason}", 403)
    except OSError as exc:
        return None, Shot(path, None, f"not read: {exc.strerror or exc}", 404)
    if not data.startswith(PNG_SIGNATURE):
        return None, Shot(path, None, "refused: not a PNG image", 403)
    return data, shot
