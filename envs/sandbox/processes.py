"""Processes and uids as the sandbox sees them: kill a command's group or its waiter's children, feed a command
its input without blocking, open a process's namespaces, count a uid's processes, pick an unused uid.

Plain syscalls and /proc reads, no state: each helper is safe to call on a process that has exited already
(a missing process is not an error).
"""
from __future__ import annotations

import os
import secrets
import signal
import threading


def unused_uid() -> int:
    """A uid no account uses: RLIMIT_NPROC then counts only this sandbox's processes, and its files are
    unreadable to other sandboxes. No /etc/passwd entry is needed for a bare uid."""
    return 200_000 + secrets.randbelow(1_000_000)


def count_processes(uid: int) -> int:
    """How many processes `uid` runs now (256 when /proc cannot be read)."""
    try:
        return sum(1 for p in os.listdir("/proc") if p.isdigit() and os.stat(f"/proc/{p}").st_uid == uid)
    except OSError:
        return 256


def killpg(pgid: int) -> None:
    """SIGKILL a process group, if it is still there."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_children_of(waiter: int) -> None:
    """SIGKILL the children of a command's waiter (the command, and the orphans it inherited); the waiter
    then kills what they leave to it and exits. Each is checked to be the waiter's child right before."""
    try:
        with open(f"/proc/{waiter}/task/{waiter}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        kids = []
    for kid in kids:
        try:
            with open(f"/proc/{kid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == waiter:
                    os.kill(kid, signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def open_ns(pid: int) -> tuple[int, int]:
    """File descriptors of a process's network and mount namespaces (they keep the namespaces alive)."""
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    return net, mnt


def send_input(pipe, data: bytes) -> None:
    """Write a command's stdin and close it, never blocking the caller past what the pipe buffer holds."""
    if len(data) <= 60000:  # fits in the pipe buffer: no writer thread needed
        _feed(pipe, data)
    else:  # a thread, so a command that never reads its input cannot block us past the timeout
        threading.Thread(target=_feed, args=(pipe, data), daemon=True).start()


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass
