"""Opening files in a folder that other programs write, for ingest: ground/files.py's rules (inside that
folder only, no symbolic link followed, regular files only, bounded), its refusals turned into rejected inputs
(`Refused`, a BadInput: recorded in `ingest_errors` with no byte of the file, as any bad input is).
The watcher reads every skill, sidecar and inbox file through here, and `lake import` every file of a folder.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from edge.errors import BadInput, TooLarge
from ground import files


class Refused(BadInput):
    """A file that is not read at all: a symbolic link, not a regular file, or a path out of the folder."""

    def __init__(self, reason: str, *, kind: str):
        super().__init__(reason, kind=kind, status=422)


def open_fd(root: str | os.PathLike, rel: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `rel` (posix, relative) under `root`, with its fstat; no symbolic link
    is followed on the way. Raises Refused (a link, not a regular file) or OSError (absent, unreadable)."""
    try:
        return files.open_fd(root, rel)
    except files.Refusal as exc:
        raise Refused(exc.reason, kind=exc.kind) from None


@contextmanager
def open_file(root: str | os.PathLike, rel: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """`open_fd` as a binary file object (closed on exit) and its fstat."""
    fd, st = open_fd(root, rel)
    with os.fdopen(fd, "rb") as fh:
        yield fh, st


@contextmanager
def open_named(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """ground.files.open_named (a named file, opened without blocking, regular files only) with its
    refusal as the ingest wing's Refused; closed on exit."""
    try:
        fh = files.open_named(path)
    except files.Refusal as exc:
        raise Refused(exc.reason, kind=exc.kind) from None
    with fh:
        yield fh


def read_file(root: str | os.PathLike, rel: str, limit: int) -> bytes:
    """The bytes of the regular file `rel` under `root`: TooLarge beyond `limit` (by its size, or by what was
    read: at most limit+1 bytes, so a file growing meanwhile cannot make it read more)."""
    try:
        return files.read_regular(root, rel, limit)
    except files.Refusal as exc:
        if exc.kind == "too_large":
            raise TooLarge(exc.reason, status=422) from None
        raise Refused(exc.reason, kind=exc.kind) from None


def read_optional(root: str | os.PathLike, rel: str, limit: int) -> bytes | None:
    """read_file, or None when the file is not there."""
    try:
        return read_file(root, rel, limit)
    except FileNotFoundError:
        return None
