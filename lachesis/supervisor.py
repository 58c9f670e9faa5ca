"""A small process supervisor for `just up`: start each component as its own process, show one live status line
per component, restart a crashed one with exponential backoff, stop them all on Ctrl-C. A component that exits
with a usage error (exit code 2: a bad option, a folder it refuses) is not restarted: a restart cannot cure it, so
the supervisor stops everything and `failed` says which component and its last output line (its error).

Why not a thread per component or a library: each component is a `lake` command a user could run alone
(serve, watch, train watch), and a crash of one (an out-of-memory trainer) must not take the others down.
Each child runs in its own session, so Ctrl-C reaches only the supervisor, which stops the children in reverse
start order (SIGTERM, then SIGKILL after `stop_timeout`): consumers stop before the writers they follow.
A child's stdout and stderr go to `<log_dir>/<name>.log`; its status line shows the last line written there.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ground import processes

BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0
HEALTHY_S = 30.0  # a component up this long has its backoff reset
USAGE_ERROR = 2  # the exit code of every `lake` command's one-line user error (lachesis.console.fail)


@dataclass
class Component:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None


@dataclass
class Supervised:
    """A component and what the supervisor knows of it."""

    component: Component
    log: Path
    proc: subprocess.Popen | None = None
    state: str = "stopped"  # starting | running | backoff | failed | stopped
    restarts: int = 0
    started_at: float = 0.0
    next_start: float = 0.0
    last_rc: int | None = None
    failures: int = field(default=0)  # consecutive crashes, for the backoff

    def last_line(self, limit: int = 4096) -> str:
        if not self.log.is_file():
            return ""
        with self.log.open("rb") as fh:
            fh.seek(max(0, self.log.stat().st_size - limit))
            lines = [x for x in fh.read().decode("utf-8", "replace").splitlines() if x.strip()]
        return lines[-1].strip() if lines else ""


def backoff(failures: int) -> float:
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, failures - 1))


class Supervisor:
    def __init__(self, components: list[Component], log_dir: Path, on_event: Callable[[str], None] | None = None,
                 stop_timeout: float = 10.0):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.items = [Supervised(c, log_dir / f"{c.name}.log") for c in components]
        self.on_event = on_event or (lambda _msg: None)
        self.stop_timeout = stop_timeout
        self.failed: str | None = None  # why everything stops: a component's usage error

    def _start(self, item: Supervised) -> None:
        env = {**os.environ, **(item.component.env or {})}
        with item.log.open("ab") as log:
            # a marker between runs: a restart appends to the same file, and the reader sees where this run starts
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            log.write(f"=== {stamp} lake up: {item.component.name} starts: {shlex.join(item.component.argv)}\n"
                      .encode())
            log.flush()
            item.proc = subprocess.Popen(item.component.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        item.state, item.started_at = "running", time.monotonic()

    def start(self) -> None:
        for item in self.items:
            self._start(item)

    def poll(self) -> None:
        """Restart what crashed (after its backoff), reset the backoff of what has been healthy long enough."""
        now = time.monotonic()
        for item in self.items:
            if item.state == "running" and item.proc is not None:
                rc = item.proc.poll()
                if rc is None:
                    if item.failures and now - item.started_at > HEALTHY_S:
                        item.failures = 0
                    continue
                item.last_rc, item.failures = rc, item.failures + 1
                if rc == USAGE_ERROR:
                    item.state = "failed"
                    self.failed = f"{item.component.name} stopped with a usage error: {item.last_line()} (log {item.log})"
                    self.on_event(self.failed)
                    continue
                item.state, item.next_start = "backoff", now + backoff(item.failures)
                self.on_event(f"{item.component.name} exited with code {rc}; restart in {backoff(item.failures):.0f} s "
                              f"(log {item.log})")
            elif item.state == "backoff" and now >= item.next_start:
                item.restarts += 1
                self._start(item)
                self.on_event(f"{item.component.name} restarted (restart {item.restarts})")

    def stop(self) -> None:
        """SIGTERM every child's process group, in reverse start order, then SIGKILL what is left after the timeout."""
        live = [i for i in reversed(self.items) if i.proc is not None]
        killed = processes.stop([i.proc for i in live], self.stop_timeout, group=True)  # a session each
        for item in live:
            if item.proc in killed:
                self.on_event(f"{item.component.name} did not stop in {self.stop_timeout:.0f} s: killed")
        for item in self.items:
            if item.state != "failed":
                item.state = "stopped"

    def rows(self) -> list[dict]:
        now = time.monotonic()
        out = []
        for item in self.items:
            if item.state == "running":
                state = f"running pid {item.proc.pid} up {_duration(now - item.started_at)}"
            elif item.state == "backoff":
                state = f"exited {item.last_rc}, restart in {max(0.0, item.next_start - now):.0f} s"
            elif item.state == "failed":
                state = f"exited {item.last_rc} (usage error)"
            else:
                state = item.state
            out.append({"name": item.component.name, "state": state, "restarts": item.restarts,
                        "last": item.last_line()})
        return out

    def run(self, stop: threading.Event, render: Callable[[list[dict]], None], interval: float = 0.5) -> None:
        """Start everything, then poll and render until `stop` is set; stop everything on the way out."""
        self.start()
        try:
            while not self.failed and not stop.wait(interval):
                self.poll()
                render(self.rows())
        finally:
            self.stop()
            render(self.rows())


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
