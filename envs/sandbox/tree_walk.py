"""Directory trees of any depth, walked without recursion: how much a workspace holds and how it is deleted.

An agent can make a tree 3000 directories deep, or directories it made unreadable or read-only: a recursive
walk (shutil.rmtree) raised RecursionError on the first, and a path-based one passes PATH_MAX. Here one
directory fd is open at a time, the names above it are on a stack and '..' climbs back, so any depth costs the
same; unreadable or read-only directories are made accessible (they are the agent's own). Symbolic links are
never followed. `tree_usage` is the polled workspace quota (sandbox.py), `remove_tree` the sandbox's cleanup.
"""
from __future__ import annotations

import os

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk(path: str, on_dir, on_entry) -> None:
    """Visit a directory tree of any depth without recursion and without a path longer than PATH_MAX (a
    3000-deep tree made the recursive rmtree raise RecursionError): one directory fd open at a time, the
    names of the directories above on a stack, '..' to climb back. on_entry(dir_fd, entry) is called for
    every entry; on_dir(dir_fd, name) after the directory `name` (below dir_fd) has been visited; either
    returns True to stop."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    stack: list[tuple[str, list[str]]] = []
    try:
        pending = _scan(fd, on_entry)
        while pending is not None:
            if pending:
                name = pending.pop()
                try:
                    child = _open_dir(name, fd)
                except OSError:
                    continue
                stack.append((name, pending))
                os.close(fd)
                fd = child
                pending = _scan(fd, on_entry)
                continue
            if not stack:
                break
            name, pending = stack.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            if on_dir(fd, name):
                break
    finally:
        os.close(fd)


def _open_dir(name: str, fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:  # a directory the agent made unreadable (it is its own, or we are root)
        os.chmod(name, 0o700, dir_fd=fd)
        return os.open(name, _DIR_FLAGS, dir_fd=fd)


def _scan(fd: int, on_entry) -> list[str] | None:
    """The subdirectories of an open directory, after on_entry saw every entry (None: stop)."""
    subdirs = []
    with os.scandir(fd) as entries:
        for e in entries:
            if on_entry(fd, e):
                return None
            try:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.name)
            except OSError:
                continue
    return subdirs


def tree_usage(path: str, max_bytes: int, max_entries: int) -> tuple[int, int]:
    """Bytes (allocated blocks) and entries below `path`; stops counting once past either limit."""
    used = [0, 0]

    def on_entry(fd: int, e: os.DirEntry) -> bool:
        try:
            used[0] += e.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            pass
        used[1] += 1
        return used[0] > max_bytes or used[1] > max_entries

    _walk(path, lambda fd, name: False, on_entry)
    return used[0], used[1]


def _writable_retry(fd: int, op) -> None:
    """Run op(); if the directory (fd) was made read-only, make it writable and try once more."""
    try:
        op()
    except PermissionError:
        try:
            os.chmod(fd, 0o700)
            op()
        except OSError:
            pass
    except OSError:
        pass


def remove_tree(path: str) -> None:
    """Delete a directory tree of any depth (nothing of the agent's runs any more)."""
    if not os.path.lexists(path):
        return

    def on_entry(fd: int, e: os.DirEntry) -> bool:
        if not e.is_dir(follow_symlinks=False):
            _writable_retry(fd, lambda: os.unlink(e.name, dir_fd=fd))
        return False

    def on_dir(fd: int, name: str) -> bool:
        _writable_retry(fd, lambda: os.rmdir(name, dir_fd=fd))
        return False

    _walk(path, on_dir, on_entry)
    try:
        os.rmdir(path)
    except OSError:
        pass
