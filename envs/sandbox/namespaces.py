"""Building one episode's namespaces (full isolation): a maker process builds the network and mount namespaces
with the episode's system view (mountns.setup), they are opened as fds, and the maker exits.

Contract: `build_namespaces(view, workdir)` returns (net fd, mnt fd), which keep the namespaces alive after the
maker has gone; the caller (sandbox.py: once per episode, every command joins them with setns) closes them. It
uses the spawn helper when there is one, else forks here with a preexec function; it raises OSError when the
namespaces could not be built or the maker never left the caller's network namespace.
"""
from __future__ import annotations

import os
import select
import subprocess
from pathlib import Path

from envs.sandbox.processes import open_ns
from envs.sandbox.programs import mountns
from envs.sandbox.spawner import Spawner, get_spawner
from envs.sandbox.system_view import sandbox_python

READY_TIMEOUT_S = 20  # how long the spawned maker may take to say its namespaces exist


def build_namespaces(view: dict, workdir: Path) -> tuple[int, int]:
    """(net, mnt) namespace fds of a new episode whose system view is `view` (system_view.py's spec); a forked
    maker runs in `workdir` (the sandbox's directory)."""
    spawner = get_spawner(sandbox_python())
    return _build_spawned(spawner, view) if spawner is not None else _build_forked(view, workdir)


def _maker(view: dict) -> dict:
    """The request of the process that builds an episode's namespaces (full mode) and then waits."""
    return {"mode": "build", "view": view, "argv": ["/bin/cat"], "env": {}}


def _build_forked(view: dict, workdir: Path) -> tuple[int, int]:
    req = _maker(view)
    maker = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=workdir, env={},
                             preexec_fn=lambda: (os.setsid(), mountns.setup(req)))
    try:  # Popen returns once the preexec function has run: the namespaces exist
        return open_ns(maker.pid)
    finally:
        maker.stdin.close()
        maker.wait()


def _build_spawned(spawner: Spawner, view: dict) -> tuple[int, int]:
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    req = {**_maker(view), "ready": True}
    try:
        child = spawner.spawn(req, {"stdin": in_r, "stdout": out_w})
        os.close(out_w)
        out_w = -1
        # The maker writes one byte once its namespaces are built; before that its /proc/PID/ns
        # entries would still be ours.
        ready, _, _ = select.select([out_r], [], [], READY_TIMEOUT_S)
        if not ready or os.read(out_r, 1) != b"R":
            raise OSError("sandbox namespaces could not be built: " + os.read(out_r, 500).decode(errors="replace")
                          if ready else "sandbox namespaces: no answer")
        fds = open_ns(child.pid)
        if os.fstat(fds[0]).st_ino == os.stat("/proc/self/ns/net").st_ino:
            raise OSError("sandbox namespaces: the maker is still in the caller's network namespace")
        return fds
    finally:
        for fd in (in_r, in_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)
