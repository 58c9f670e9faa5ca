"""Opening files that other programs write (inside their folder only) or that someone named: regular files only,
bounded.

A folder the lake reads from belongs to others (Hermes writes skills and trajectories there, and so can the
agent it runs; `lake import` takes whatever a folder holds), so a name there promises nothing: a `SKILL.md`
may be a symlink to /etc/shadow or to a secret, a FIFO (an open() that never returns, whatever signal
arrives), or a device such as /dev/zero (a read without end). So such files are opened here, by descriptor:
each folder below the root with O_NOFOLLOW|O_DIRECTORY, the file itself with O_NOFOLLOW|O_NONBLOCK (a FIFO
opens at once instead of waiting for a writer); then fstat must say "regular file" and at most `limit + 1`
bytes are read. The checks hold for the descriptor that is read, so a file swapped for a link between the
listing and the read is refused as well. A refused file is never read: its `Refusal` carries no bytes of it.
The root itself is the caller's choice and may be a link. Used by lake.skill_files (the views' skills reader)
and by ingest (the watcher and `lake import`, which turn a Refusal into a rejected input).

A file someone named (an option, a config file) is read by `read_named`: a link to it is followed (naming it was
their choice), but only a regular file of at most `limit` bytes is read (a FIFO, a folder or a device is a
Refusal before a byte is read): the --token-file of both servers, a run's files, lachesis.toml, envs' task files.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import PurePosixPath
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}


class Refusal(Exception):
    """A file that is not read: a symbolic link (`kind` symlink), not a regular file (not_regular), a path
    leading out of the folder (outside) or past the size limit (too_large)."""

    def __init__(self, reason: str, kind: str, what: str | None = None):
        super().__init__(reason)
        self.reason, self.kind = reason, kind
        self.what = what  # not_regular and symlink: what the file is instead ("a FIFO", "a folder", ...)


def refusal(name: str, mode: int) -> Refusal:
    """The Refusal of a file named `name` of this st_mode (a link, a FIFO, a device, ...)."""
    what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    if stat.S_ISLNK(mode):
        return Refusal(f"{name} is a symbolic link: not followed (only regular files inside the folder are read)",
                       "symlink", what)
    return Refusal(f"{name} is {what}, not a regular file: not read", "not_regular", what)


def _open_at(dir_fd: int, name: str, flags: int) -> int:
    """os.open relative to dir_fd; a symbolic link (ELOOP, or ENOTDIR for a folder) becomes a Refusal."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if not stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise  # ENOTDIR: a file where a folder was expected
        raise refusal(name, stat.S_IFLNK) from None


def open_fd(root: str | os.PathLike, rel: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `rel` (posix, relative) under `root`, with its fstat; no symbolic link
    is followed on the way. Raises Refusal (a link, not a regular file) or OSError (absent, unreadable)."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "/") for p in parts):
        raise Refusal(f"{rel}: not a path inside the folder", "outside")
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
        raise refusal(rel, st.st_mode)
    return ffd, st


def read_regular(root: str | os.PathLike, rel: str, limit: int) -> bytes:
    """The bytes of the regular file `rel` under `root`; a Refusal (too_large) beyond `limit` bytes, by its
    size or by what was read (at most limit+1 bytes: a file growing meanwhile cannot make it read more)."""
    fd, st = open_fd(root, rel)
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > limit:
            raise Refusal(f"{rel}: {st.st_size} bytes, more than the limit of {limit}", "too_large")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Refusal(f"{rel}: more than the limit of {limit} bytes", "too_large")
    return data


def open_named(path: str | os.PathLike) -> BinaryIO:
    """A file someone named (a command-line option, a config file), open for reading: a link to it is followed
    (naming it was their choice), but it is opened without blocking and only when it is a regular file (a FIFO or
    a device is a Refusal, not_regular). The caller closes it. OSError when absent or unreadable."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a folder with an error of its own
        os.close(fd)
        raise refusal(str(path), mode)
    return os.fdopen(fd, "rb")


def read_named(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of `open_named(path)`, at most `limit` of them (a larger file by its size is refused before it is
    read; by what was read, at most limit+1 bytes). Raises Refusal (not_regular, too_large) or OSError (absent,
    unreadable)."""
    with open_named(path) as fh:
        if os.fstat(fh.fileno()).st_size > limit:
            raise Refusal(f"{path}: more than the limit of {limit} bytes", "too_large")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Refusal(f"{path}: more than the limit of {limit} bytes", "too_large")
    return data
