"""The caller's side of the spawn helper (programs/spawner.py).

Every sandboxed command is forked by one small helper process instead of by the caller: a fork with
a preexec function copies the caller's page tables, which in a trainer holding a model costs tens of
milliseconds per command (measured: 8 ms in a bare interpreter, 46 ms with torch and 200 MB). The
helper is started once per process (a plain spawn, no fork of the caller's memory), and restarted
after os.fork() or if it dies. LACHESIS_SANDBOX_SPAWNER=0 turns it off (commands then fork here).
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import threading

from envs.programs import source


class SpawnError(OSError):
    pass


class Child:
    def __init__(self, req_id: int):
        self.id = req_id
        self.pid: int | None = None
        self.error: str | None = None
        self.exit_code: int | None = None
        self.started = threading.Event()
        self.done = threading.Event()

    def poll(self) -> int | None:
        return self.exit_code if self.done.is_set() else None

    def wait(self, timeout: float | None = None) -> int | None:
        self.done.wait(timeout)
        return self.exit_code


class Spawner:
    def __init__(self, python: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([python, "-I", "-S", "-c", source("spawner"), str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={})
        theirs.close()
        self.sock = ours
        self.pid = os.getpid()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, Child] = {}
        self._alive = True
        threading.Thread(target=self._read, daemon=True, name="sandbox-spawner").start()

    def _read(self) -> None:
        while True:
            try:
                msg = self.sock.recv(1 << 16)
            except OSError:
                msg = b""
            if not msg:
                break
            rep = json.loads(msg)
            child = self._pending.get(rep["id"])
            if child is None:
                continue
            if "pid" in rep:
                child.pid = rep["pid"]
                child.started.set()
            elif "error" in rep:
                child.error = rep["error"]
                child.started.set()
                child.done.set()
                self._pending.pop(child.id, None)
            elif "exit" in rep:
                child.exit_code = rep["exit"]
                child.done.set()
                self._pending.pop(child.id, None)
        self._alive = False
        for child in list(self._pending.values()):  # the helper died: nobody will report these
            child.error = child.error or "spawn helper exited"
            child.started.set()
            child.done.set()

    @property
    def alive(self) -> bool:
        return self._alive and self.proc.poll() is None

    def spawn(self, req: dict, fds: dict[str, int]) -> Child:
        child = Child(next(self._ids))
        self._pending[child.id] = child
        msg = json.dumps({**req, "id": child.id, "fd_names": list(fds)}).encode()
        with self._lock:
            socket.send_fds(self.sock, [msg], list(fds.values()))
        if not child.started.wait(30) or child.error:
            self._pending.pop(child.id, None)
            raise SpawnError(child.error or "spawn helper did not answer")
        return child


_SPAWNER: Spawner | None = None
_LOCK = threading.Lock()


def get_spawner(python: str) -> Spawner | None:
    """The process's helper, started on first use; None when it is turned off or cannot start."""
    global _SPAWNER
    if os.environ.get("LACHESIS_SANDBOX_SPAWNER", "1") == "0":
        return None
    with _LOCK:
        if _SPAWNER is None or _SPAWNER.pid != os.getpid() or not _SPAWNER.alive:
            try:
                _SPAWNER = Spawner(python)
            except OSError:
                _SPAWNER = None
        return _SPAWNER
