"""What sandboxes leave behind, cleaned up: the ones still open at interpreter exit are closed, and those of
processes that died without closing them (kill -9) are swept by the next process that makes a sandbox.

A sandbox's folder is named after the pid of the process that made it (`dir_prefix()`), and so is its cgroup
(cgroups.py): a workspace mount or a cgroup whose creator is gone is unmounted, deleted and removed
(`sweep_stale`, run once per process before its first sandbox). `track(box)` registers an open sandbox so
that interpreter exit closes it (a workspace mount outlives its process otherwise).
"""
from __future__ import annotations

import atexit
import os
import re
import tempfile
import weakref

from envs.sandbox.cgroups import sweep_stale as sweep_stale_groups
from envs.sandbox.programs import mountns
from envs.sandbox.tree_walk import remove_tree
from ground.processes import pid_alive

DIR_PREFIX = "lachesis-sbx-"
_LIVE: weakref.WeakSet = weakref.WeakSet()  # the open sandboxes of this process (anything with close())
_SWEPT = False


def dir_prefix() -> str:
    """The name prefix of a sandbox folder this process makes (under the temp dir): it carries the pid."""
    return f"{DIR_PREFIX}{os.getpid()}-"


def track(box) -> None:
    """Close `box` at interpreter exit if it is still open then."""
    _LIVE.add(box)


@atexit.register
def _close_live() -> None:
    """At interpreter exit close what is still open (a workspace mount outlives its process otherwise)."""
    for box in list(_LIVE):
        try:
            box.close()
        except OSError:
            pass


def sweep_stale_once() -> None:
    """sweep_stale, the first time this process asks."""
    global _SWEPT
    if not _SWEPT:
        _SWEPT = True
        sweep_stale()


def sweep_stale() -> None:
    """Unmount and delete the workspaces, and remove the cgroups, of sandboxes whose process died without
    closing them (kill -9)."""
    sweep_stale_groups(pid_alive)
    pattern = re.compile(re.escape(tempfile.gettempdir()) + "/" + re.escape(DIR_PREFIX) + r"(\d+)-[^/]+/workspace")
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return
    for point in points:
        m = pattern.fullmatch(point)
        if m is None or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        try:
            mountns.umount(point)
        except OSError:
            continue
        remove_tree(os.path.dirname(point))
