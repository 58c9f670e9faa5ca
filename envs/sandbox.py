"""The sandbox every environment command runs in.

One `Sandbox` is one episode: a fresh temporary workspace, and `run()` executes a command in it with
- a wall-clock timeout (the whole process group is killed, and in full mode every process of the
  sandbox's own uid, so `sleep 100 &` or a double fork cannot outlive the command),
- rlimits (CPU seconds, address space, processes, file size, open files, no core dumps),
- a scrubbed environment (PATH, HOME, LANG and what the environment adds; nothing of the caller's),
- output truncated to a limit, and a flood killed once it passes a hard cap,
- a workspace quota, checked while a long command runs and after every command.

Isolation depends on what the kernel allows (detected once, `isolation_mode()`):
- "full" (running as root): the episode gets its own network namespace (only a down loopback) and
  mount namespace with a read-only view of the system (/usr, /etc, the Python prefix), a private
  /tmp (tmpfs), a minimal /dev and the workspace at /workspace; they are built once per episode and
  every command joins them (setns + chroot) and runs as an unused uid, so RLIMIT_NPROC really bounds a
  fork bomb and nothing outside the workspace is writable.
- "userns" (unprivileged user namespaces): the same view, built per command inside a user namespace;
  the process limit counts the caller's own processes, so it is set relative to how many run already.
  (Meant for unprivileged callers: forced as root it maps to root itself; root gets "full".)
- "rlimits": timeouts, rlimits, scrubbed env and output limits only (other kernels, macOS); as root
  the command still runs as an unused uid.

Commands are started by a small spawn helper (spawner.py), one per process, so a caller holding a
model in memory is never forked per command (measured: 50 ms per command from a 400 MB torch
process when it forks itself, 5 ms through the helper; `python bench/bench_envs.py` measures it again).

Hidden tests and checkers never touch the workspace: they are piped to a checker process on stdin at
scoring time (see checks.py), so the agent cannot read or edit them (docs/peers.md item 9).
"""
from __future__ import annotations

import os
import resource
import secrets
import select
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from envs.programs import mountns
from envs.spawner import Spawner, get_spawner

WORKSPACE_INSIDE = "/workspace"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0
    cpu_s: int = 10
    memory_bytes: int = 1 << 30
    processes: int = 64
    file_size_bytes: int = 16 << 20
    open_files: int = 256
    output_bytes: int = 8192  # what the observation keeps
    output_hard_bytes: int = 4 << 20  # past this much output the command is killed (a flood)
    workspace_bytes: int = 64 << 20
    tmp_bytes: int = 16 << 20


@dataclass(frozen=True)
class RunResult:
    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    killed: str = ""  # why the sandbox killed the command ("timeout", "output flood", "workspace quota")
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.killed

    def observation(self) -> str:
        """The tool-result text an agent sees: output, then a note when something went wrong."""
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.truncated:
            parts.append("[output truncated]")
        if self.killed == "timeout":
            parts.append("[killed: command timed out]")
        elif self.killed:
            parts.append(f"[killed: {self.killed}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}{_signal_note(self.exit_code)}]")
        return "\n".join(parts) if parts else "(no output)"


def _signal_note(code: int) -> str:
    if code < 0:
        try:
            return f", {signal.Signals(-code).name}"
        except ValueError:
            return ""
    if code == 128 + signal.SIGXFSZ:
        return ", file size limit exceeded"
    return ""


# ---------------------------------------------------------------- isolation detection

_MODE: str | None = None


def isolation_mode() -> str:
    """The strongest isolation this process can set up: "full", "userns" or "rlimits" (cached)."""
    global _MODE
    if _MODE is None:
        forced = os.environ.get("LACHESIS_SANDBOX_ISOLATION")
        if forced in ("full", "userns", "rlimits"):
            _MODE = forced
        else:
            _MODE = _probe()
    return _MODE


def _probe() -> str:
    if not sys.platform.startswith("linux") or not mountns.available():
        return "rlimits"
    for mode in (("full",) if os.geteuid() == 0 else ()) + ("userns",):
        try:
            with Sandbox(Limits(timeout_s=5), isolation=mode) as box:
                result = box.run(["/bin/sh", "-c", "test -d /workspace"])
            if result.exit_code == 0:
                return mode
        except (OSError, subprocess.SubprocessError):
            continue
    return "rlimits"


# ---------------------------------------------------------------- the sandbox


def _python_prefix() -> str:
    return os.path.realpath(sys.base_prefix)


def sandbox_python() -> str:
    """The interpreter checkers and tests run with inside the sandbox (the caller's base Python)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = os.path.join(_python_prefix(), "bin", version)
    return candidate if os.path.exists(candidate) else os.path.realpath(sys.executable)


def _world_executable(path: str) -> bool:
    """Can any uid run this? (every parent directory searchable by others, the file executable)."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(path)
        while parent != "/":
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(parent)
    except OSError:
        return False
    return True


def _python_for_uid() -> str:
    """Without a chroot view an own uid cannot enter a private prefix (pyenv under /root): use a system one."""
    own = sandbox_python()
    if _world_executable(own):
        return own
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if _world_executable(candidate):
            return candidate
    return own


def _system_view(root: str, workspace: str, tmp_bytes: int) -> dict:
    """The chroot view (mountns.build's spec): computed before any fork, so the child only mounts."""
    view: dict = {"root": root, "workspace": workspace, "dirs": [], "symlinks": [], "binds": [], "devices": [],
                  "tmp_opts": f"size={tmp_bytes},mode=1777"}
    made: set[str] = set()

    def mkdirs(path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                view["dirs"].append(root + sub)

    def ro_flags(src: str) -> int:
        # A read-only remount inside a user namespace must keep the locked nosuid/nodev/noexec flags.
        f = os.statvfs(src).f_flag
        return mountns.MS_RDONLY | (f & (mountns.MS_NOSUID | mountns.MS_NODEV | mountns.MS_NOEXEC))

    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"):
        src = "/" + top
        if os.path.islink(src):
            view["symlinks"].append([root + src, os.readlink(src)])
        elif os.path.isdir(src):
            mkdirs(src)
            view["binds"].append([src, root + src, ro_flags(src)])
    prefix = _python_prefix()
    if not any(prefix == p or prefix.startswith(p + "/") for p in ("/usr", "/opt")):
        mkdirs(prefix)
        view["binds"].append([prefix, root + prefix, ro_flags(prefix)])
    mkdirs("/dev")
    for dev in ("null", "zero", "random", "urandom"):
        if os.path.exists(f"/dev/{dev}"):
            view["devices"].append([f"/dev/{dev}", root + f"/dev/{dev}"])
    mkdirs("/tmp")
    mkdirs(WORKSPACE_INSIDE)
    return view


def _unused_uid() -> int:
    # A uid no account uses: RLIMIT_NPROC then counts only this sandbox's processes, and its files
    # are unreadable to other sandboxes. No /etc/passwd entry is needed for a bare uid.
    return 200_000 + secrets.randbelow(1_000_000)


class Sandbox:
    """A fresh workspace plus a way to run commands in it. Use as a context manager or call close()."""

    def __init__(self, limits: Limits | None = None, *, isolation: str | None = None,
                 env: dict[str, str] | None = None):
        self.limits = limits or Limits()
        self.isolation = isolation or isolation_mode()
        self._dir = Path(tempfile.mkdtemp(prefix="lachesis-sbx-"))
        os.chmod(self._dir, 0o700)
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir(mode=0o700)
        # As root the command always runs as an unused uid (also without namespaces): root ignores
        # RLIMIT_NPROC and file permissions, so only an own uid makes those limits real.
        self.own_uid = os.geteuid() == 0 and self.isolation != "userns"
        self.uid = _unused_uid() if self.own_uid else os.getuid()
        self.gid = self.uid if self.own_uid else os.getgid()
        if self.own_uid:
            os.chown(self.workspace, self.uid, self.gid)
            if self.isolation == "rlimits":  # no chroot: the uid must be able to pass through to its workspace
                os.chmod(self._dir, 0o711)
        self._root = self._dir / "root"
        self._view: dict | None = None  # mountns.build's spec, in the namespace modes
        if self.isolation in ("full", "userns"):
            self._root.mkdir(mode=0o755)
            self._view = _system_view(str(self._root), str(self.workspace), self.limits.tmp_bytes)
        self.path_inside = WORKSPACE_INSIDE if self._view else str(self.workspace)
        # The interpreter checkers and tests run with (the chroot view holds the caller's own prefix).
        self.python = sandbox_python() if self._view or not self.own_uid else _python_for_uid()
        base_env = {
            "PATH": f"/usr/local/bin:/usr/bin:/bin:{os.path.dirname(self.python)}",
            "HOME": self.path_inside,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        self.env = {**base_env, **(env or {})}
        # Without an own uid RLIMIT_NPROC counts every process of the caller: allow what runs already.
        self._nproc = self.limits.processes + (0 if self.own_uid else _count_processes(os.getuid()))
        self._ns_fds: tuple[int, int] | None = None  # (net, mnt) of this episode, in full mode
        self._closed = False

    # ------------------------------------------------------------ files (parent side, before the agent runs)

    def write_files(self, files: dict[str, str]) -> None:
        """Seed the workspace. Called before any agent command, so no agent-made symlink can redirect it."""
        for rel, content in files.items():
            target = self.workspace / safe_relpath(rel)
            self._mkdirs(target.parent)
            target.write_text(content)
            if self.own_uid:
                os.chown(target, self.uid, self.gid)

    def _mkdirs(self, path: Path) -> None:
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for p in reversed(missing):
            p.mkdir()
            if self.own_uid:
                os.chown(p, self.uid, self.gid)

    # ------------------------------------------------------------ running

    def run(self, command: str | list[str], *, stdin: str | bytes | None = None,
            timeout_s: float | None = None, output_bytes: int | None = None,
            env: dict[str, str] | None = None) -> RunResult:
        """Run a shell command (str, through bash) or an argv list in the workspace.

        output_bytes overrides how much output is kept (tools that read a whole file need more than an
        observation shows); env replaces the sandbox's environment (the checkers run in a clean one)."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        argv = ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        limits = self.limits
        timeout = limits.timeout_s if timeout_s is None else timeout_s
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        keep = limits.output_bytes if output_bytes is None else min(output_bytes, limits.output_hard_bytes)
        spawner = get_spawner(sandbox_python())
        if spawner is not None:
            fd, poll, wait, pid = self._start_spawned(spawner, argv, data, env or self.env)
        else:
            fd, poll, wait, pid = self._start_forked(argv, data, env or self.env)
        try:
            output, truncated, killed, lingering = self._collect(fd, poll, pid, start + timeout, keep)
        finally:
            os.close(fd)
        exit_code = wait()
        # Children still holding the output pipe after the command exited get the uid-wide sweep too.
        self._kill_leftovers(pid, sweep=bool(killed) or lingering)
        if not killed and self._over_quota():
            killed = "workspace quota exceeded"
        text = output.decode("utf-8", errors="replace")
        return RunResult(text, None if killed == "timeout" else exit_code, timed_out=killed == "timeout",
                         truncated=truncated, killed=killed, seconds=time.monotonic() - start)

    def _start_forked(self, argv: list[str], data: bytes | None, env: dict[str, str]):
        """Fork here with a preexec function (the fallback when the spawn helper is off)."""
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self._dir if self._view else self.workspace,
            env=env,
            preexec_fn=self._enter() if self._namespaces() else self._preexec(),
            close_fds=True,
            pass_fds=self._ns_fds or (),
        )
        if data is not None:
            _send_input(proc.stdin, data)
        fd = os.dup(proc.stdout.fileno())
        proc.stdout.close()
        return fd, proc.poll, proc.wait, proc.pid

    def _start_spawned(self, spawner: Spawner, argv: list[str], data: bytes | None, env: dict[str, str]):
        out_r, out_w = os.pipe()
        in_r = in_w = None
        fds = {"stdout": out_w}
        if data is not None:
            in_r, in_w = os.pipe()
            fds["stdin"] = in_r
        req = {"argv": argv, "env": env, "rlimits": self._rlimits(), "own_uid": self.own_uid,
               "uid": self.uid, "gid": self.gid}
        if self.isolation == "full":
            net, mnt = self._namespaces()
            fds.update(net=net, mnt=mnt)
            req.update(mode="enter", root=str(self._root))
        elif self._view is not None:
            req.update(mode="build", view=self._view, userns=self.isolation == "userns",
                       outer_uid=os.getuid(), outer_gid=os.getgid())
        else:
            req.update(mode="plain", cwd=str(self.workspace))
        try:
            child = spawner.spawn(req, fds)
        except BaseException:
            os.close(out_r)
            if in_w is not None:
                os.close(in_w)
            raise
        finally:
            os.close(out_w)
            if in_r is not None:
                os.close(in_r)
        if in_w is not None:
            _send_input(open(in_w, "wb", buffering=0), data)

        def wait() -> int:
            code = child.wait(10)  # the command is dead or killed by now; this only bounds a wedged helper
            return 127 if code is None else code

        return out_r, child.poll, wait, child.pid

    def _collect(self, fd: int, poll, pid: int, deadline: float, keep: int) -> tuple[bytes, bool, str, bool]:
        limits = self.limits
        kept = bytearray()
        seen = 0
        killed = ""
        exited_at: float | None = None
        lingering = False
        next_quota = time.monotonic() + 0.25
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    killed = "timeout"
                    break
                if exited_at is None and poll() is not None:
                    exited_at = now
                # A background child can hold the pipe open after the command exits: give it a moment.
                if exited_at is not None and now - exited_at > 0.05:
                    lingering = True
                    break
                if now >= next_quota:
                    next_quota = now + 0.25
                    if self._over_quota():
                        killed = "workspace quota exceeded"
                        break
                wait = min(deadline - now, 0.05 if exited_at is not None else 0.25)
                if not sel.select(wait):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                seen += len(chunk)
                room = keep - len(kept)
                if room > 0:
                    kept += chunk[:room]
                if seen > limits.output_hard_bytes:
                    killed = "output flood"
                    break
        if killed:
            self._kill_leftovers(pid, sweep=True)
        return bytes(kept), seen > keep, killed, lingering

    def _kill_leftovers(self, pgid: int, *, sweep: bool) -> None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if sweep and self.own_uid:
            self._kill_uid()

    def stop_everything(self) -> None:
        """Kill every process the agent left behind (called before scoring, so nothing of the agent's
        runs next to the checker: no late file edits, no ptrace of the checker by a daemonized child)."""
        if self.own_uid and not self._closed:
            self._kill_uid()

    def _kill_uid(self) -> None:
        """kill(-1) as the sandbox uid signals every process of that uid, including ones that left the group."""
        spawner = get_spawner(sandbox_python())
        if spawner is not None:
            try:
                spawner.spawn({"mode": "kill", "own_uid": True, "uid": self.uid, "gid": self.gid}, {}).wait(10)
                return
            except OSError:
                pass
        pid = os.fork()
        if pid == 0:  # the child only makes syscalls, then leaves without running any Python cleanup
            try:
                os.setgid(self.gid)
                os.setuid(self.uid)
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            os._exit(0)
        os.waitpid(pid, 0)

    def _over_quota(self) -> bool:
        total = 0
        stack = [str(self.workspace)]
        while stack:
            try:
                with os.scandir(stack.pop()) as entries:
                    for e in entries:
                        st = e.stat(follow_symlinks=False)
                        total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            stack.append(e.path)
            except OSError:
                continue
            if total > self.limits.workspace_bytes:
                return True
        return False

    def _namespaces(self) -> tuple[int, int] | None:
        """Full mode builds the namespaces once per episode and every command joins them with setns():
        two syscalls instead of an unshare and some twenty mounts (half the step overhead, bench.py).
        Open namespace fds keep the namespaces alive after the process that made them has exited."""
        if self.isolation != "full":
            return None
        if self._ns_fds is None:
            spawner = get_spawner(sandbox_python())
            self._ns_fds = self._build_spawned(spawner) if spawner is not None else self._build_forked()
        return self._ns_fds

    def _build_forked(self) -> tuple[int, int]:
        maker = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, cwd=self._dir, env={}, preexec_fn=self._preexec())
        try:  # Popen returns once the preexec function has run: the namespaces exist
            return _open_ns(maker.pid)
        finally:
            maker.stdin.close()
            maker.wait()

    def _build_spawned(self, spawner: Spawner) -> tuple[int, int]:
        out_r, out_w = os.pipe()
        in_r, in_w = os.pipe()
        req = {"mode": "build", "view": self._view, "argv": ["/bin/cat"], "env": {}, "ready": True}
        try:
            child = spawner.spawn(req, {"stdin": in_r, "stdout": out_w})
            os.close(out_w)
            out_w = -1
            # The maker writes one byte once its namespaces are built; before that its /proc/PID/ns
            # entries would still be ours.
            ready, _, _ = select.select([out_r], [], [], 20)
            if not ready or os.read(out_r, 1) != b"R":
                raise OSError("sandbox namespaces could not be built: " + os.read(out_r, 500).decode(errors="replace")
                              if ready else "sandbox namespaces: no answer")
            fds = _open_ns(child.pid)
            if os.fstat(fds[0]).st_ino == os.stat("/proc/self/ns/net").st_ino:
                raise OSError("sandbox namespaces: the maker is still in the caller's network namespace")
            return fds
        finally:
            for fd in (in_r, in_w, out_r, out_w):
                if fd >= 0:
                    os.close(fd)

    def _enter(self):
        net, mnt = self._ns_fds
        root = str(self._root)
        uid, gid = self.uid, self.gid
        rlimits = self._rlimits()

        def preexec() -> None:
            os.setsid()
            mountns.enter(net, mnt, root)
            os.close(net)  # the command must not keep handles on the namespaces
            os.close(mnt)
            _become_sandbox_user(True, uid, gid, rlimits)  # full mode runs as root: always an own uid

        return preexec

    def _rlimits(self) -> list[tuple[int, int]]:
        limits = self.limits
        return [
            (resource.RLIMIT_CPU, limits.cpu_s),
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_size_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NPROC, self._nproc),
        ]

    def _preexec(self):
        view, userns = self._view, self.isolation == "userns"
        uid, gid, own_uid = self.uid, self.gid, self.own_uid
        outer_uid, outer_gid = os.getuid(), os.getgid()
        rlimits = self._rlimits()

        def preexec() -> None:
            os.setsid()
            if view is not None:
                mountns.build(view, userns, outer_uid, outer_gid)
            _become_sandbox_user(own_uid, uid, gid, rlimits)

        return preexec

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.own_uid:
            self._kill_uid()
        if self._ns_fds:
            for fd in self._ns_fds:
                os.close(fd)
            self._ns_fds = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:  # at interpreter exit the helper or the tree may be gone already
            pass


def _become_sandbox_user(own_uid: bool, uid: int, gid: int, rlimits: list[tuple[int, int]]) -> None:
    """The last step of both preexec functions, in the child, as the spawn helper does it: drop to the
    sandbox's own uid, then apply the rlimits."""
    if own_uid:
        mountns.drop_to(uid, gid)
    mountns.set_rlimits(rlimits)


def _open_ns(pid: int) -> tuple[int, int]:
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    return net, mnt


def _send_input(pipe, data: bytes) -> None:
    if len(data) <= 60000:  # fits in the pipe buffer: no writer thread needed
        _feed(pipe, data)
    else:  # a thread, so a command that never reads its input cannot block us past the timeout
        threading.Thread(target=_feed, args=(pipe, data), daemon=True).start()


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _count_processes(uid: int) -> int:
    try:
        return sum(1 for p in os.listdir("/proc") if p.isdigit() and os.stat(f"/proc/{p}").st_uid == uid)
    except OSError:
        return 256


def safe_relpath(rel: str) -> str:
    """A workspace-relative path, refused if it is absolute or climbs out with '..'."""
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm == ".." or norm.startswith("../") or norm in ("", "."):
        raise ValueError(f"path must stay inside the workspace: {rel!r}")
    return norm
