"""Processes: whether one is alive (stale lock and cache owners, a server's pid) and stopping children (TERM, a
wait, then KILL), the one implementation of each that every wing uses."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Iterable


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user counts: it is alive, we may not signal it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def send(proc: subprocess.Popen, sig: int, *, group: bool = False) -> None:
    """`sig` to the child, or with `group` to its process group (a child started in a session of its own: its
    children too); one that is gone already is no error."""
    try:
        os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    except ProcessLookupError:
        pass


def stop(procs: Iterable[subprocess.Popen], timeout: float, *, group: bool = False,
         term: bool = True) -> list[subprocess.Popen]:
    """Stop the children still running: SIGTERM to each (`term`; without it they were told otherwise, as a STOP
    file), then wait for them all, `timeout` seconds in all, and SIGKILL (and reap) each still there then. The
    ones that had to be killed, in the order given."""
    live = [p for p in procs if p.poll() is None]
    if term:
        for p in live:
            send(p, signal.SIGTERM, group=group)
    deadline = time.monotonic() + timeout
    killed = []
    for p in live:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            send(p, signal.SIGKILL, group=group)
            p.wait()
            killed.append(p)
    return killed
