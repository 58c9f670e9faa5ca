"""Raw Linux syscalls the sandbox needs (unshare, mount, chroot), bound through ctypes.

Python 3.11 has no os.unshare/os.mount, and a helper binary per command would cost a process start
(several ms) on every step, so the sandbox calls these in the forked child (subprocess preexec_fn).
Everything is resolved before fork, so the child only makes syscalls.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

_libc = None
if os.name == "posix":
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        _libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc/Linux: the sandbox falls back to rlimits only
        _libc = None


def available() -> bool:
    return _libc is not None and hasattr(_libc, "unshare")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None) -> None:
    _check(_libc.mount(source, target, fstype, flags, data), f"mount {target!r}")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), "setns")
