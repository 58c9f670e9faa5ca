"""The caller's side of the spawn helper (programs/spawner.py).

Every sandboxed command is forked by one small helper process instead of by the caller: a fork with
a preexec function copies the caller's page tables, which in a trainer holding a model costs tens of
milliseconds per command (envs/README.md, "Figures behind the code"). The
helper is started once per process (a plain spawn, no fork of the caller's memory), and restarted
after os.fork() or if it dies. Each request carries its own status pipe, so callers in any thread
read their own answers; there is no reader thread. LACHESIS_SANDBOX_SPAWNER=0 turns it off.
"""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading

from envs.sandbox.programs import path


class SpawnError(OSError):
    pass


class Child:
    """A command started by the helper: its pid, and its exit code once the helper reports it."""

    def __init__(self, status_fd: int):
        self._fd = status_fd
        self._buf = b""
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.error: str | None = None
        self._closed = False

    def _read(self, timeout: float | None) -> bool:
        """Read whatever the helper wrote; False when the wait timed out."""
        if self._closed:
            return True
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self._fd, 4096)
        if not chunk:
            self._close()
            if self.exit_code is None and self.error is None:
                self.error = "spawn helper exited"
            return True
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            kind, value = line[:1], line[1:].decode()
            if kind == b"P":
                self.pid = int(value)
            elif kind == b"X":
                self.exit_code = int(value)
            elif kind == b"E":
                self.error = value
        return True

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def started(self, timeout: float = 30) -> None:
        while self.pid is None and self.error is None and not self._closed:
            if not self._read(timeout):
                break
        if self.pid is None:
            self._close()
            raise SpawnError(self.error or "spawn helper did not answer")

    def poll(self) -> int | None:
        if self.exit_code is None and not self._closed:
            self._read(0)
        return self.exit_code

    def wait(self, timeout: float | None = None) -> int | None:
        while self.exit_code is None and not self._closed:
            if not self._read(timeout):
                break
        self._close()
        return self.exit_code

    def __del__(self) -> None:
        try:
            self._close()
        except OSError:
            pass


class Spawner:
    def __init__(self, python: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # -E -S: no PYTHON* variables, no site-packages; not -I, which would drop the script's directory
        # (and so its sibling mountns.py) from the import path.
        self.proc = subprocess.Popen([python, "-E", "-S", path("spawner"), str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={})
        theirs.close()
        self.sock = ours
        self.pid = os.getpid()
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, req: dict, fds: dict[str, int]) -> Child:
        status_r, status_w = os.pipe()
        child = Child(status_r)
        msg = json.dumps({**req, "fd_names": list(fds) + ["status"]}).encode()
        try:
            with self._lock:
                socket.send_fds(self.sock, [msg], list(fds.values()) + [status_w])
        except OSError as exc:
            child._close()
            raise SpawnError(f"spawn helper unreachable: {exc}") from None
        finally:
            os.close(status_w)
        child.started()
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
