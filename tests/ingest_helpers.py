"""Helpers to run `lake serve` / `lake watch` as real subprocesses (the ingest tests and bench/bench_ingest.py):
the real CLI on a loopback port, so the tests see what a client sees, with no mocks in between."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lake_cmd(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-c", "from lachesis.cli import main; main()"]


class _Process:
    proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class ServerProcess(_Process):
    """`lake serve` (or `command`: serve-model) on a loopback port; `start()` waits for /v1/health. Leaving the
    `with` block kills it (-9)."""

    def __init__(self, lake_root, *, port: int | None = None, token: str | None = None, extra=(),
                 log_path: str | os.PathLike | None = None, python: str | None = None,
                 cwd: str | os.PathLike | None = None, command: str = "serve"):
        self.command = command
        self.python = python
        self.cwd = cwd  # the source tree the server's code is imported from (bench: an older commit's)
        self.lake_root = str(lake_root)
        self.port = port or free_port()
        self.token = token
        self.extra = list(extra)
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self, bind_retry_s: float = 0.0) -> "ServerProcess":
        """Start the process without waiting (with bind_retry_s: a standby for a port still in use)."""
        cmd = lake_cmd(self.python) + [self.command, "--lake", self.lake_root, "--port", str(self.port)] + self.extra
        if self.token:
            cmd += ["--token", self.token]
        if bind_retry_s:
            cmd += ["--bind-retry-s", str(bind_retry_s)]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=self.cwd)
        return self

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        if self.proc is None:
            self.spawn()
        return self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lake {self.command} exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"lake {self.command} did not become healthy")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill()


class WatchProcess(_Process):
    """`lake watch` on a skills folder and/or an inbox; leaving the `with` block stops it (SIGTERM)."""

    def __init__(self, lake_root, *, skills=None, inbox=None, settle: float = 0.2, interval: float = 0.5,
                 extra=(), log_path: str | os.PathLike | None = None):
        self.log_path = log_path
        self.args = ["watch", "--lake", str(lake_root), "--settle", str(settle), "--interval", str(interval),
                     *extra]
        if skills:
            self.args += ["--skills", str(skills)]
        if inbox:
            self.args += ["--inbox", str(inbox)]

    def start(self) -> "WatchProcess":
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # never an unread pipe
        self.proc = subprocess.Popen(lake_cmd() + self.args, stdout=log, stderr=log)
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
