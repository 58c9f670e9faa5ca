"""Where a command may write a folder of its own (`lake export -o`, `lake export-model -o`): the one set of rules.

Why: a folder written inside a lake is data no reader of the lake expects, and `lake export --overwrite` into a
partition would delete the lake's data files. `check_output_folder(out, lakes=..., error=...)` refuses, with one
line in the caller's own error class, an output that lies inside a lake: one of `lakes`, or any folder holding the
lake's marker (`_lachesis/`), at or above the output. It looks at the path twice, as written with `..` folded
(`os.path.abspath`) and as it resolves (symbolic links followed, a dangling one to where it points), so `..`, a
symbolic link to a folder of the lake, a symlinked parent and a link inside the lake that points out all give the
same refusal. `avoid` names further folders the output must not lie in (`lake export-model`: the run's own
checkpoints). Then a temp folder is made and removed in the nearest folder above the output that exists, so a place
nothing can be written to (`/proc/self/x`, an immutable folder, a read-only file system, a file where a folder should
be) is one line before any work is done, and a refused output leaves nothing behind.
An output that is a symbolic link is written where it points, as the resolved path says; the path returned.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterable

from ground.errors import UserError
from lake.tables import MARKER


def check_output_folder(out: str | os.PathLike, *, lakes: Iterable[Path] = (), avoid: Iterable[Path] = (),
                        error: type[UserError] = UserError) -> Path:
    """The resolved folder `out` names, after the rules above; `error(message)` when one refuses it."""
    written = Path(os.path.abspath(Path(out).expanduser()))
    resolved = written.resolve()
    known = {Path(os.path.abspath(p)).resolve() for p in lakes}
    for path in (resolved, written):  # where it lands first: the message names the lake's own folder
        for folder in (path, *path.parents):
            if folder in known or os.path.isdir(folder / MARKER):  # isdir: an unreadable folder is no lake, no error
                raise error(f"refusing to write into {out}: it is inside the lake at {folder}; "
                            "choose a folder outside it")
    for folder in avoid:
        inner = Path(os.path.abspath(folder)).resolve()
        if any(inner == p or inner in p.parents for p in (written, resolved)):
            raise error(f"refusing to write into {out}: it is inside {folder}, which the command reads; "
                        "choose a folder outside it")
    _probe(out, resolved, error)
    return resolved


def _probe(out: str | os.PathLike, resolved: Path, error: type[UserError]) -> None:
    """A temp folder made and removed where the output's folders would be made: one line when nothing can be."""
    base = next(p for p in resolved.parents if os.path.lexists(p))
    probe = base / f".{resolved.name}.probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise error(f"cannot write into {out}: {exc.strerror or exc} ({base})") from None
