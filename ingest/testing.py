"""Helpers to run `lake serve` / `lake watch` as real subprocesses (tests, benchmarks, demos)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lake_cmd(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-c", "from lachesis.cli import main; main()"]


class ServerProcess:
    """`lake serve` on a loopback port; `start()` waits for /v1/health."""

    def __init__(self, lake_root, *, port: int | None = None, token: str | None = None, extra=(),
                 log_path: str | os.PathLike | None = None, python: str | None = None):
        self.python = python
        self.lake_root = str(lake_root)
        self.port = port or free_port()
        self.token = token
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None
        self.log_path = log_path
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self, bind_retry_s: float = 0.0) -> "ServerProcess":
        """Start the process without waiting (with bind_retry_s: a standby for a port still in use)."""
        cmd = lake_cmd(self.python) + ["serve", "--lake", self.lake_root, "--port", str(self.port)] + self.extra
        if self.token:
            cmd += ["--token", self.token]
        if bind_retry_s:
            cmd += ["--bind-retry-s", str(bind_retry_s)]
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log)
        return self

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        if self.proc is None:
            self.spawn()
        return self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> "ServerProcess":
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lake serve exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("lake serve did not become healthy")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill()


class WatchProcess:
    def __init__(self, lake_root, *, skills=None, inbox=None, settle: float = 0.2, interval: float = 0.5,
                 extra=()):
        self.args = ["watch", "--lake", str(lake_root), "--settle", str(settle), "--interval", str(interval),
                     *extra]
        if skills:
            self.args += ["--skills", str(skills)]
        if inbox:
            self.args += ["--inbox", str(inbox)]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(lake_cmd() + self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def extract_hermes_corpus(dest: Path) -> Path:
    """Unpack the vendored hermes-agent 0.19.0 SKILL.md corpus (tests/data) into dest/{skills,optional-skills}."""
    import tarfile

    src = Path(__file__).resolve().parent.parent / "tests" / "data" / "hermes_skills_0.19.0.tar.gz"
    with tarfile.open(src) as tf:
        tf.extractall(dest, filter="data")
    return dest


def hermes_skills_tree(dest: Path) -> Path:
    """A Hermes-layout skills folder (`<category>/<name>/SKILL.md`, 177 skills) from the vendored corpus:
    the bundled `skills/` tree with the hub-installable `optional-skills/` merged in, `.bundled_manifest`
    naming the bundled ones and `.hub/lock.json` the optional ones, as `~/.hermes/skills` looks after
    installing them. Returns the folder to watch (point a Watcher at it, not at the raw sdist layout)."""
    import json
    import shutil
    import tempfile

    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        src = extract_hermes_corpus(Path(tmp))
        shutil.copytree(src / "skills", dest, dirs_exist_ok=True)
        shutil.copytree(src / "optional-skills", dest, dirs_exist_ok=True)
        bundled = []
        for p in sorted((src / "skills").rglob("SKILL.md")):
            for line in p.read_text(encoding="utf-8").splitlines():
                if line.startswith("name:"):
                    bundled.append(line.split(":", 1)[1].strip())
                    break
        hub = sorted({p.parent.name for p in (src / "optional-skills").rglob("SKILL.md")})
    (dest / ".bundled_manifest").write_text("".join(f"{n}:0\n" for n in bundled), encoding="utf-8")
    (dest / ".hub").mkdir(exist_ok=True)
    lock = {"version": 1, "installed": {d: {"source": "official", "identifier": f"official/{d}"} for d in hub}}
    (dest / ".hub" / "lock.json").write_text(json.dumps(lock, indent=2), encoding="utf-8")
    return dest
