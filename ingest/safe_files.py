"""Opening files in a folder that other programs write: inside that folder only, regular files only, bounded.

The watcher's folders belong to others (Hermes writes skills and trajectories there, and so can the agent it
runs), so a name there promises nothing: a `SKILL.md` may be a symlink to /etc/shadow (whose bytes would end
up in `ingest_errors`) or to a secret (in `skills.metadata`), a FIFO (an open() that never returns, whatever
signal arrives), or a device such as /dev/zero (a read without end). So every file the watcher reads is
opened here, by descriptor: each folder below the root with O_NOFOLLOW|O_DIRECTORY, the file itself with
O_NOFOLLOW|O_NONBLOCK (a FIFO opens at once instead of waiting for a writer); then fstat must say "regular
file" and at most `limit + 1` bytes are read. The checks hold for the descriptor that is read, so a file
swapped for a link between the listing and the read is refused as well. A refused file is never read: its
error carries no bytes of it.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import BinaryIO, Iterator

from ingest.errors import BadInput, TooLarge

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}


class Refused(BadInput):
    """A file that is not read at all: a symbolic link, or not a regular file."""

    def __init__(self, reason: str, *, kind: str):
        super().__init__(reason, kind=kind, status=422)


def _refusal(name: str, mode: int) -> Refused:
    what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    if stat.S_ISLNK(mode):
        return Refused(f"{name} is a symbolic link: not followed (only regular files inside the folder are read)",
                       kind="symlink")
    return Refused(f"{name} is {what}, not a regular file: not read", kind="not_regular")


def _open_at(dir_fd: int, name: str, flags: int) -> int:
    """os.open relative to dir_fd; a symbolic link (ELOOP, or ENOTDIR for a folder) becomes Refused."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if not stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise  # ENOTDIR: a file where a folder was expected
        raise _refusal(name, stat.S_IFLNK) from None


def open_fd(root: str | os.PathLike, rel: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `rel` (posix, relative) under `root`, with its fstat; no symbolic link
    is followed on the way. Raises Refused (a link, not a regular file) or OSError (absent, unreadable)."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "/") for p in parts):
        raise Refused(f"{rel}: not a path inside the folder", kind="outside")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nfd = _open_at(fd, part, _DIR_FLAGS)
            os.close(fd)
            fd = nfd
        ffd = _open_at(fd, parts[-1], _FILE_FLAGS)
    finally:
        os.close(fd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode):
        os.close(ffd)
        raise _refusal(rel, st.st_mode)
    return ffd, st


@contextmanager
def open_file(root: str | os.PathLike, rel: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """`open_fd` as a binary file object (closed on exit) and its fstat."""
    fd, st = open_fd(root, rel)
    with os.fdopen(fd, "rb") as fh:
        yield fh, st


def read_file(root: str | os.PathLike, rel: str, limit: int) -> bytes:
    """The bytes of the regular file `rel` under `root`: TooLarge beyond `limit` (by its size, or by what was
    read: at most limit+1 bytes, so a file growing meanwhile cannot make it read more)."""
    with open_file(root, rel) as (fh, st):
        if st.st_size > limit:
            raise TooLarge(f"{rel}: {st.st_size} bytes, more than the limit of {limit}", status=422)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{rel}: more than the limit of {limit} bytes", status=422)
    return data


def read_optional(root: str | os.PathLike, rel: str, limit: int) -> bytes | None:
    """read_file, or None when the file is not there."""
    try:
        return read_file(root, rel, limit)
    except FileNotFoundError:
        return None
