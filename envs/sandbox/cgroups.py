"""One cgroup per sandbox: a memory cap over all of an episode's processes together.

RLIMIT_AS bounds each process alone, so several processes together exceed it (issue 11 item 6; envs/README.md).
A cgroup counts them together, tmpfs pages they write included, and the kernel's OOM killer acts inside
the group only. The sandbox creates the group, and each command's process joins it before it drops its
privileges (mountns.setup writes its pid into the group's cgroup.procs files).

Where: cgroup v2 (memory.max, memory.swap.max) below this process's own cgroup when its subtree has or
accepts the memory controller, else the cgroup v1 memory hierarchy (memory.limit_in_bytes,
memory.memsw.limit_in_bytes) below this process's group there. It needs write access there, in practice
root; without it `Group.procs` is empty and the per-process rlimits are all there is. No pids group:
the sandbox only makes one when it runs commands as its own unused uid, whose RLIMIT_NPROC already
counts exactly the sandbox's processes (and each join costs a step time).
"""
from __future__ import annotations

import os
import re
import secrets
import time
from typing import Callable

ROOT = "/sys/fs/cgroup"
_BASES: dict[str, str] | None = None  # controller -> directory under which this process may create groups
CONTROLLERS = ("memory",)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _v2_base(rel: str) -> tuple[str, set[str]] | None:
    for mount in (ROOT, f"{ROOT}/unified"):
        if os.path.exists(f"{mount}/cgroup.controllers"):
            base = mount + rel.rstrip("/")
            try:
                enabled = set(_read(f"{base}/cgroup.subtree_control").split())
                wanted = set(CONTROLLERS) & set(_read(f"{base}/cgroup.controllers").split())
                if wanted - enabled:  # refused while this cgroup holds processes itself (v2's no-internal-process rule)
                    _write(f"{base}/cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(wanted - enabled)))
                    enabled = set(_read(f"{base}/cgroup.subtree_control").split())
            except OSError:
                return None
            return base, enabled & set(CONTROLLERS)
    return None


def bases() -> dict[str, str]:
    """Where each controller can take a new group (cached; {} when none can)."""
    global _BASES
    if _BASES is None:
        found: dict[str, str] = {}
        try:
            lines = _read("/proc/self/cgroup").splitlines()
        except OSError:
            lines = []
        for line in lines:
            hid, ctrls, rel = line.split(":", 2)
            if hid == "0" and not ctrls:
                v2 = _v2_base(rel)
                if v2 is not None:
                    for c in v2[1]:
                        found.setdefault(c, v2[0])
            else:
                for c in ctrls.split(","):
                    if c in CONTROLLERS and os.path.isdir(f"{ROOT}/{c}"):
                        found.setdefault(c, f"{ROOT}/{c}{rel.rstrip('/')}")
        _BASES = {c: b for c, b in found.items() if os.access(b, os.W_OK)}
    return _BASES


class Group:
    """The cgroup(s) of one sandbox. `procs`: the cgroup.procs files a command's process writes its pid to."""

    def __init__(self, memory_bytes: int):
        self.dirs: list[str] = []
        self.procs: list[str] = []
        self.enforced: list[str] = []  # the limits in force ("memory")
        name = f"lachesis-{os.getpid()}-{secrets.token_hex(4)}"
        by_dir: dict[str, list[str]] = {}
        for ctrl, base in bases().items():
            by_dir.setdefault(base, []).append(ctrl)
        for base, ctrls in by_dir.items():
            path = f"{base}/{name}"
            try:
                os.mkdir(path)
            except OSError:
                continue
            self.dirs.append(path)
            try:
                for ctrl in ctrls:
                    self._limit(path, memory_bytes)
                    self.enforced.append(ctrl)
            except OSError:
                continue
            self.procs.append(f"{path}/cgroup.procs")

    @staticmethod
    def _limit(path: str, memory_bytes: int) -> None:
        if os.path.exists(f"{path}/memory.max"):  # v2
            _write(f"{path}/memory.max", str(memory_bytes))
            if os.path.exists(f"{path}/memory.swap.max"):
                _write(f"{path}/memory.swap.max", "0")
        else:  # v1: memory plus swap capped alike, so nothing escapes into swap
            _write(f"{path}/memory.limit_in_bytes", str(memory_bytes))
            if os.path.exists(f"{path}/memory.memsw.limit_in_bytes"):
                _write(f"{path}/memory.memsw.limit_in_bytes", str(memory_bytes))

    def close(self) -> None:
        """Remove the groups; their processes are dead by now (the last exits can lag a moment)."""
        for path in self.dirs:
            if os.path.exists(f"{path}/cgroup.kill"):
                try:
                    _write(f"{path}/cgroup.kill", "1")
                except OSError:
                    pass
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.dirs, self.procs = [], []


def sweep_stale(alive: Callable[[int], bool]) -> None:
    """Remove the groups of sandboxes whose process died without closing them (their pid is in the name)."""
    for base in set(bases().values()):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(r"lachesis-(\d+)-[0-9a-f]+", name)
            if m and int(m.group(1)) != os.getpid() and not alive(int(m.group(1))):
                try:
                    os.rmdir(f"{base}/{name}")
                except OSError:  # still holds a process (it would be alive then) or is gone already
                    continue
