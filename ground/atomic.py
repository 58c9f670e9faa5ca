"""Crash-safe writes, the one implementation of "write beside, then os.replace" for files and folders.

A file: `write_bytes_atomic` writes a temp file in the same directory, fsyncs it, then renames it over the target,
so a reader (or a process killed mid-write) sees the old file or the new one, never a part. A folder:
`folder_atomically(out)` gives a temp folder beside `out` to fill and renames it into place when the block ends,
or removes it when the block fails; `move_into` puts a finished folder's entries into a folder the user made,
which stays (an export's output folder).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from ground.durable import fsync_all, fsync_fd, fsync_path

NEW_FILE_MODE = 0o644  # a new file's mode (mkstemp's own is 0600: the file would be the one others cannot read)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace the file at `path` with `data` at once. Through a symbolic link the link's target is replaced and the
    link stays; an existing file keeps its mode."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            fsync_fd(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2))


def read_json(path: Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


@contextmanager
def folder_atomically(out: Path, *, replace: bool = False, durable: bool = False,
                      in_place_of: Iterable[Path] | None = None) -> Iterator[Path]:
    """A new temp folder beside `out` (on its file system, so the rename is atomic) for the block to fill; when the
    block ends it becomes `out` in one os.replace, and a reader sees no folder or the complete one. `out` may be
    absent or an empty folder; a complete one already there is swapped out and removed with `replace`, else
    FileExistsError (another writer's copy got there first). `in_place_of`: an existing `out` stays (the user's
    own folder: its mode, a mount point) and these old entries of it make way for the new ones (`move_into`).
    `durable`: every file and folder fsynced, as a checkpoint must be. No temp folder is left behind."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:12]}")
    tmp.mkdir()  # not mkdtemp: its 0700 would become the published folder's mode; this one gets the umask's
    try:
        yield tmp
        if durable:
            fsync_all([*tmp.rglob("*"), tmp])
        if in_place_of is not None:
            move_into(tmp, out, in_place_of)
        else:
            _publish(tmp, out, replace)
        if durable:
            fsync_path(out.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, out: Path, replace: bool) -> None:
    aside = None
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()  # an empty folder (the one the user made for it) is replaced by the complete one
    elif replace and out.exists():
        aside = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")  # os.replace cannot overwrite a full folder
        os.replace(out, aside)
    try:
        os.replace(tmp, out)
    except OSError as exc:
        if not out.exists():
            raise
        raise FileExistsError(f"{out} was written meanwhile by another process") from exc
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


def move_into(tmp: Path, out: Path, old: Iterable[Path] = ()) -> None:
    """Put the finished folder `tmp` at `out`: one os.replace when there is no `out` yet; into an existing folder
    (the user's, which stays), its `old` entries removed first and tmp's entries moved in one by one."""
    if not out.is_dir():
        os.replace(tmp, out)
        return
    for p in old:
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in sorted(tmp.iterdir()):
        os.replace(p, out / p.name)
