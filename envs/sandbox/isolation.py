"""Which isolation this kernel gives the sandbox, found once per process by trying it.

The modes, strongest first:
- "full" (running as root): the episode gets its own network namespace (only a down loopback) and
  mount namespace with a read-only, nosuid view of the system (/usr, /etc, the Python prefix: system_view.py),
  a private /tmp (tmpfs), a minimal /dev and the workspace at /workspace; they are built once per
  episode and every command joins them (setns + chroot) and runs as an unused uid, so RLIMIT_NPROC
  really bounds a fork bomb and nothing outside the workspace is writable. Each command is pid 1 of a
  PID namespace of its own (`pid_namespaces`): it cannot tell which host pids exist, and what it
  leaves behind dies with it.
- "userns" (unprivileged user namespaces): the same view, built per command inside a user namespace.
  Unprivileged, the process limit counts the caller's own processes, so it is set relative to how many
  run already; forced as root, the namespace is built by the unused uid (mapped to 0 inside), so root's
  files stay out of reach.
- "rlimits": timeouts, rlimits, scrubbed env and output limits only (other kernels, macOS); as root
  the command still runs as an unused uid.

Contract: `isolation_mode(open_box)` and `pid_namespaces(open_box)` answer once per process (cached) and
never raise; LACHESIS_SANDBOX_ISOLATION (full, userns, rlimits) and LACHESIS_SANDBOX_PIDNS (0, 1) force the
answers. The trying is done in a real sandbox that the caller opens: `open_box(isolation, pid_namespace)`
returns one as a context manager (sandbox.py passes its own, so this module imports no sandbox).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, ContextManager

from envs.sandbox.programs import mountns

MODES = ("full", "userns", "rlimits")
NAMESPACE_MODES = ("full", "userns")

OpenBox = Callable[[str | None, bool], ContextManager]  # (isolation or None for the detected one, pid namespace)

_MODE: str | None = None
_PIDNS: bool | None = None


def isolation_mode(open_box: OpenBox) -> str:
    """The strongest isolation this process can set up: "full", "userns" or "rlimits" (cached)."""
    global _MODE
    if _MODE is None:
        forced = os.environ.get("LACHESIS_SANDBOX_ISOLATION")
        if forced in MODES:
            _MODE = forced
        else:
            _MODE = _probe(open_box)
    return _MODE


def _probe(open_box: OpenBox) -> str:
    if not sys.platform.startswith("linux") or not mountns.available():
        return "rlimits"
    for mode in (("full",) if os.geteuid() == 0 else ()) + ("userns",):
        try:
            with open_box(mode, False) as box:
                result = box.run(["/bin/sh", "-c", "test -d /workspace"])
            if result.exit_code == 0:
                return mode
        except (OSError, subprocess.SubprocessError):
            continue
    return "rlimits"


def pid_namespaces(open_box: OpenBox) -> bool:
    """Whether each command gets a PID namespace of its own (cached; LACHESIS_SANDBOX_PIDNS=0 or 1 forces it):
    in the namespace modes, where one command shows that it runs as pid 1. Without one a
    command could list the host's processes with kill(pid, 0) (EPERM says a pid exists, ESRCH that it does not)."""
    global _PIDNS
    if _PIDNS is None:
        forced = os.environ.get("LACHESIS_SANDBOX_PIDNS")
        if forced in ("0", "1"):
            _PIDNS = forced == "1"
        elif isolation_mode(open_box) not in NAMESPACE_MODES:
            _PIDNS = False
        else:
            try:
                with open_box(None, True) as box:
                    _PIDNS = box.run(["/bin/sh", "-c", "echo $$"]).output.strip() == "1"
            except (OSError, subprocess.SubprocessError):
                _PIDNS = False
    return _PIDNS
