"""The sandbox every environment command runs in.

One `Sandbox` is one episode: a fresh workspace, and `run()` executes a command in it with
- a wall-clock timeout (the command's process group is killed, and with an own uid every process of
  that uid),
- every process a command leaves behind killed when it ends: the spawn helper is a child subreaper, so
  a double-forked daemon with closed descriptors becomes its child and is killed (programs/spawner.py),
- rlimits (CPU seconds, address space, processes, file size, open files, no core dumps) and
  PR_SET_NO_NEW_PRIVS (no setuid binary raises anyone's privileges),
- as root, a cgroup over all of the sandbox's processes (their total memory: cgroups.py),
- a scrubbed environment (PATH, HOME, LANG and what the environment adds; nothing of the caller's),
- output truncated to a limit, and a flood killed once it passes a hard cap,
- a workspace quota: as root a tmpfs with a size and an inode limit (the kernel refuses what does not
  fit), else a directory polled while a long command runs and after every command.
envs/README.md has the table of which limit is enforced by what, and the fallbacks.

Isolation depends on what the kernel allows: "full" (as root: namespaces built once per episode, an own uid,
each command pid 1 of its own PID namespace), "userns" (the same view per command in a user namespace) or
"rlimits"; isolation.py detects it once (`isolation_mode()`, `pid_namespaces()`) and describes each mode.
The command's view of the system is system_view.py's, the process helpers are processes.py's, what a dead
process left behind is swept by leftovers.py, and the workspace is measured and deleted by tree_walk.py. The
limits and a command's result are limits.py's (`Limits`, `RunResult`), a command's output is read by output.py,
and full mode's namespaces are built by namespaces.py.

Commands are started by a small spawn helper (spawner.py), one per process, so a caller holding a
model in memory is never forked per command: copying its page tables would cost tens of milliseconds a
command (envs/README.md, "Figures behind the code"); `python bench/bench_envs.py` measures it again.

Hidden tests and checkers never touch the workspace: they are piped to a checker process on stdin at
scoring time (see checks.py), so the agent cannot read or edit them (docs/peers.md item 9).
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from envs.sandbox import isolation as kernel_isolation, leftovers
from envs.sandbox.cgroups import Group
from envs.sandbox.limits import Limits, RunResult
from envs.sandbox.namespaces import build_namespaces
from envs.sandbox.output import collect
from envs.sandbox.processes import count_processes, kill_children_of, killpg, send_input, unused_uid
from envs.sandbox.programs import mountns
from envs.sandbox.spawner import Spawner, get_spawner
from envs.sandbox.system_view import WORKSPACE_INSIDE, python_for_uid, sandbox_python, system_view, world_executable
from envs.sandbox.tree_walk import remove_tree, tree_usage


def isolation_mode() -> str:
    """The strongest isolation this process can set up: "full", "userns" or "rlimits" (tried once: isolation.py)."""
    return kernel_isolation.isolation_mode(_probe_box)


def pid_namespaces() -> bool:
    """Whether each command gets a PID namespace of its own (tried once: isolation.py)."""
    return kernel_isolation.pid_namespaces(_probe_box)


def _probe_box(mode: str | None, pid_namespace: bool) -> "Sandbox":
    """The sandbox isolation.py tries a command in."""
    return Sandbox(Limits(timeout_s=5), isolation=mode, pid_namespace=pid_namespace)


class Sandbox:
    """A fresh workspace plus a way to run commands in it. Use as a context manager or call close()."""

    def __init__(self, limits: Limits | None = None, *, isolation: str | None = None,
                 env: dict[str, str] | None = None, pid_namespace: bool | None = None):
        self.limits = limits or Limits()
        self.isolation = isolation or isolation_mode()
        # Each command in a PID namespace of its own (mountns.pid_namespace), where the kernel gives one
        self.pid_namespace = pid_namespaces() if pid_namespace is None else pid_namespace
        # As root the command always runs as an unused uid (in every mode): root ignores RLIMIT_NPROC and
        # file permissions, so only an own uid makes those limits real. In userns mode that uid builds the
        # namespaces itself (mountns.setup), so it must be able to pass through to its workspace.
        self.own_uid = os.geteuid() == 0
        self.uid = unused_uid() if self.own_uid else os.getuid()
        self.gid = self.uid if self.own_uid else os.getgid()
        self.workspace_fs = "directory"
        self._group: Group | None = None
        self._ns_fds: tuple[int, int] | None = None  # (net, mnt) of this episode, in full mode
        leftovers.sweep_stale_once()
        # The creator's pid in the name: a workspace mount left by a process that died without close()
        # is found and removed by the next process that makes a sandbox (leftovers.sweep_stale).
        self._dir = Path(tempfile.mkdtemp(prefix=leftovers.dir_prefix()))
        self._closed = False  # from here on close() undoes what exists
        leftovers.track(self)
        os.chmod(self._dir, 0o711 if self.own_uid and self.isolation != "full" else 0o700)
        self.workspace = self._dir / "workspace"
        self.workspace.mkdir(mode=0o700)
        # The workspace: a tmpfs of its own where this process may mount one (root), so the kernel holds it
        # to its size and inode quota however many processes write at once, nothing in it is setuid, and
        # cleanup is one unmount however deep the tree; else a directory polled against the quota.
        self.workspace_fs = self._mount_workspace()
        if self.own_uid:
            os.chown(self.workspace, self.uid, self.gid)
        self._root = self._dir / "root"
        self._view: dict | None = None  # mountns.build's spec, in the namespace modes
        userns_uid = self.own_uid and self.isolation == "userns"  # the view is built as the unused uid
        if self.isolation in ("full", "userns"):
            self._root.mkdir(mode=0o755)
            self._view = system_view(str(self._root), str(self.workspace), self.limits.tmp_bytes,
                                      prefix=not userns_uid or world_executable(sandbox_python()))
        self.path_inside = WORKSPACE_INSIDE if self._view else str(self.workspace)
        # The interpreter checkers and tests run with (the chroot view holds the caller's own prefix).
        own_view = self._view is not None and not userns_uid
        self.python = sandbox_python() if own_view or not self.own_uid else python_for_uid()
        # One cgroup for all of the sandbox's processes (a memory cap), where this process may make one;
        # every command joins it before dropping its privileges.
        self._group = Group(self.limits.total_memory_bytes) if self.own_uid else None
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
        self._nproc = self.limits.processes + (0 if self.own_uid else count_processes(os.getuid()))

    def _mount_workspace(self) -> str:
        """"tmpfs" when the workspace could be made a size- and inode-limited tmpfs, else "directory"."""
        if os.geteuid() != 0 or not mountns.available():
            return "directory"
        lim = self.limits
        opts = (f"size={lim.workspace_bytes},nr_inodes={lim.workspace_inodes},mode=0700,"
                f"uid={self.uid},gid={self.gid}")
        try:
            mountns.mount("tmpfs", str(self.workspace), "tmpfs", mountns.MS_NOSUID | mountns.MS_NODEV, opts)
        except OSError:  # no CAP_SYS_ADMIN here (a container without it): the polled quota is all there is
            return "directory"
        return "tmpfs"

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
            fd, poll, wait, kill = self._start_spawned(spawner, argv, data, env or self.env)
        else:
            fd, poll, wait, kill = self._start_forked(argv, data, env or self.env)
        try:
            output, truncated, killed, lingering = collect(fd, poll, start + timeout, keep, limits.output_hard_bytes,
                                                           self._over_quota)
            if killed:
                self._kill_leftovers(kill, sweep=True)
        finally:
            os.close(fd)
        exit_code = wait()
        # Children still holding the output pipe after the command exited get the uid-wide sweep too.
        self._kill_leftovers(kill, sweep=bool(killed) or lingering)
        if not killed and self._over_quota():
            killed = "workspace quota exceeded"
        text = output.decode("utf-8", errors="replace")
        return RunResult(text, None if killed == "timeout" else exit_code, timed_out=killed == "timeout",
                         truncated=truncated, killed=killed, seconds=time.monotonic() - start)

    def _request(self, argv: list[str], env: dict[str, str]) -> dict:
        """What a command's process does before exec (mountns.setup), the same for both ways of forking."""
        req = {"argv": argv, "env": env, "rlimits": self._rlimits(), "own_uid": self.own_uid,
               "uid": self.uid, "gid": self.gid, "cgroups": self._group.procs if self._group else []}
        if self.isolation == "full":
            req.update(mode="enter", root=str(self._root))
        elif self._view is not None:
            req.update(mode="build", view=self._view, userns=self.isolation == "userns",
                       outer_uid=os.getuid(), outer_gid=os.getgid())
        else:
            req.update(mode="plain", cwd=str(self.workspace))
        if self.pid_namespace and self._view is not None:
            req["pidns"] = True
        return req

    def _start_forked(self, argv: list[str], data: bytes | None, env: dict[str, str]):
        """Fork here with a preexec function (the fallback when the spawn helper is off)."""
        # The caller is no subreaper (the spawn helper is): a waiter process reaps what the command leaves.
        req = {**self._request(argv, env), "contain": mountns.available()}
        ns = self._namespaces()

        def preexec() -> None:
            os.setsid()
            mountns.setup(req, *(ns or (None, None)))
            for fd in ns or ():
                os.close(fd)  # the command must not keep handles on the namespaces

        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self._dir if self._view else self.workspace,
            env=env,
            preexec_fn=preexec,
            close_fds=True,
            pass_fds=ns or (),
        )
        if data is not None:
            send_input(proc.stdin, data)
        fd = os.dup(proc.stdout.fileno())
        proc.stdout.close()
        if req["contain"]:  # the waiter must live on to reap: kill what it waits for, it kills the rest
            return fd, proc.poll, proc.wait, lambda: kill_children_of(proc.pid)
        return fd, proc.poll, proc.wait, lambda: killpg(proc.pid)

    def _start_spawned(self, spawner: Spawner, argv: list[str], data: bytes | None, env: dict[str, str]):
        out_r, out_w = os.pipe()
        in_r = in_w = None
        fds = {"stdout": out_w}
        if data is not None:
            in_r, in_w = os.pipe()
            fds["stdin"] = in_r
        req = self._request(argv, env)
        if self.isolation == "full":
            net, mnt = self._namespaces()
            fds.update(net=net, mnt=mnt)
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
            send_input(open(in_w, "wb", buffering=0), data)

        def wait() -> int:
            code = child.wait(10)  # the command is dead or killed by now; this only bounds a wedged helper
            return 127 if code is None else code

        return out_r, child.poll, wait, lambda: killpg(child.pid)

    def _kill_leftovers(self, kill, *, sweep: bool) -> None:
        """kill() ends the command's process group (or, forked here, what its waiter waits for); the sweep
        kills every process of the sandbox's own uid (a timeout, a flood, a child holding the pipe)."""
        kill()
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
        """The polled quota of a plain-directory workspace (a tmpfs one is held to it by the kernel)."""
        if self.workspace_fs == "tmpfs":
            return False
        used, entries = tree_usage(str(self.workspace), self.limits.workspace_bytes, self.limits.workspace_inodes)
        return used > self.limits.workspace_bytes or entries > self.limits.workspace_inodes

    def _namespaces(self) -> tuple[int, int] | None:
        """Full mode builds the namespaces once per episode and every command joins them with setns():
        two syscalls instead of an unshare and some twenty mounts (half the step overhead, bench.py).
        Open namespace fds keep the namespaces alive after the process that made them has exited."""
        if self.isolation != "full":
            return None
        if self._ns_fds is None:
            self._ns_fds = build_namespaces(self._view, self._dir)
        return self._ns_fds

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
        if self._group is not None:
            self._group.close()
        if self.workspace_fs == "tmpfs":
            try:
                mountns.umount(str(self.workspace))
            except OSError:
                pass
        remove_tree(str(self._dir))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:  # at interpreter exit the helper or the tree may be gone already
            pass


def safe_relpath(rel: str) -> str:
    """A workspace-relative path, refused if it is absolute or climbs out with '..'."""
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm == ".." or norm.startswith("../") or norm in ("", "."):
        raise ValueError(f"path must stay inside the workspace: {rel!r}")
    return norm
