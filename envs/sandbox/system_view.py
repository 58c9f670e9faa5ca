"""The system as a sandboxed command sees it: the chroot view's spec and the interpreter checkers run with.

`system_view()` computes the view mountns.build mounts in the namespace modes (isolation.py): the system's
top folders (/usr, /etc, /opt ...) and the caller's Python prefix bound read-only, nosuid and nodev, symbolic
links such as /bin -> usr/bin kept, a minimal /dev, a private /tmp and the workspace at `WORKSPACE_INSIDE`.
It is computed before any fork, so a command's child only mounts. `sandbox_python()` is the interpreter
checkers and tests run with inside the sandbox; `python_for_uid()` one that an unused uid can enter when
there is no view that holds the caller's own prefix.
"""
from __future__ import annotations

import os
import stat
import sys

from envs.sandbox.programs import mountns

WORKSPACE_INSIDE = "/workspace"


def python_prefix() -> str:
    return os.path.realpath(sys.base_prefix)


def sandbox_python() -> str:
    """The interpreter checkers and tests run with inside the sandbox (the caller's base Python)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = os.path.join(python_prefix(), "bin", version)
    return candidate if os.path.exists(candidate) else os.path.realpath(sys.executable)


def world_executable(path: str) -> bool:
    """Can any uid run this? (every parent directory searchable by others, the file executable)."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(path)
        while parent != "/":
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(parent)
    except OSError:
        return False
    return True


def python_for_uid() -> str:
    """Without a chroot view an own uid cannot enter a private prefix (pyenv under /root): use a system one."""
    own = sandbox_python()
    if world_executable(own):
        return own
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if world_executable(candidate):
            return candidate
    return own


def system_view(root: str, workspace: str, tmp_bytes: int, *, prefix: bool = True) -> dict:
    """The chroot view (mountns.build's spec): computed before any fork, so the child only mounts.
    `prefix`: bind the caller's Python prefix (not when the view is built as a uid that cannot enter it)."""
    view: dict = {"root": root, "workspace": workspace, "dirs": [], "symlinks": [], "binds": [], "devices": [],
                  "tmp_opts": f"size={tmp_bytes},mode=1777"}
    made: set[str] = set()

    def mkdirs(path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                view["dirs"].append(root + sub)

    def ro_flags(src: str) -> int:
        # Read-only, nosuid and nodev (a setuid binary gives no one root inside); a remount inside a user
        # namespace must also keep a locked noexec.
        f = os.statvfs(src).f_flag
        return mountns.MS_RDONLY | mountns.MS_NOSUID | mountns.MS_NODEV | (f & mountns.MS_NOEXEC)

    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"):
        src = "/" + top
        if os.path.islink(src):
            view["symlinks"].append([root + src, os.readlink(src)])
        elif os.path.isdir(src):
            mkdirs(src)
            view["binds"].append([src, root + src, ro_flags(src)])
    own_prefix = python_prefix()
    if prefix and not any(own_prefix == p or own_prefix.startswith(p + "/") for p in ("/usr", "/opt")):
        mkdirs(own_prefix)
        view["binds"].append([own_prefix, root + own_prefix, ro_flags(own_prefix)])
    mkdirs("/dev")
    for dev in ("null", "zero", "random", "urandom"):
        if os.path.exists(f"/dev/{dev}"):
            view["devices"].append([f"/dev/{dev}", root + f"/dev/{dev}"])
    mkdirs("/tmp")
    mkdirs(WORKSPACE_INSIDE)
    return view
