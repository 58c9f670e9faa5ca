"""Ray for the commands that take `--ray ADDRESS`: connect (or start a cluster on this machine), place actors across
the nodes, hand them work one item at a time, and say in one line when Ray is missing or the cluster is gone.

Contracts:
- `connected(address, num_cpus=N)` is the one place a command connects. `local` starts a cluster on this machine
  sized for it (N CPUs, a small object store, no dashboard) and stops it when the block ends; `auto` joins the
  cluster this machine joined with `ray start`; anything else is the cluster's address (`HOST:PORT` of its head,
  or `ray://HOST:10001`). A process already connected (a test, a notebook) keeps its connection: the block neither
  reconnects nor disconnects it. The workers' output stays in Ray's logs unless `log_to_driver`.
- `spread(cls, n, ...)` starts n actors with Ray's SPREAD strategy: on as many nodes as the cluster has.
- `dispatch(actors, method, items)` yields `(item, result)` once per item, as they finish, each actor holding at
  most one item at a time (so a slow node takes fewer). An actor that dies (its process killed, its node removed)
  is dropped and its item is played again by another; when none is left, the items not done come back as `Lost`.
  An error raised by our code in a worker is raised here as itself (a one-line user error stays one).
- `end(actors)` closes each actor's resources through its own `close` method, then ends its process.
- A cluster that cannot be reached, or whose loss Ray reports in Python, is `ClusterGone`: one line, exit status 1.
  When the raylet or object store beside a driver dies, Ray's core worker ends the driver's process itself (exit
  status 1, `_Exit`: no Python code runs, no atexit). For that end `connect(..., after=...)` starts a last-word
  watcher beside the command: a small process holding one end of a pipe, told "done" when the command disconnects
  or exits through Python. A pipe closed without "done" means the process was ended from outside; the watcher then
  prints the one line (the cluster gone, if its head no longer answers, or the process ended abruptly) and `after`,
  what was kept and how to go on (lake commits and run checkpoints are atomic: what was committed stays whole).

Ray is imported only inside these functions: without it, nothing of ours that imports this module changes.
"""
from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ground.errors import UserError

INSTALL = "pip install 'lachesis[ray]'"
LOCAL, AUTO = "local", "auto"
# what every --ray option says (the commands' config fields take it as their help)
ADDRESS_HELP = ("play on a Ray cluster's workers: local, or --ray alone (start one on this machine for this "
                "command), auto (the cluster this machine joined with `ray start`) or the head's HOST:PORT or "
                "ray://HOST:10001; needs Ray, the ray extra of lachesis")  # no brackets: the --help is Rich markup
# A cluster started here is sized for a small shared machine: Ray's default object store takes 30% of memory, and
# what moves through it here is episodes and small weights (a bigger model: start the cluster with `ray start`).
OBJECT_STORE_MB = 128
CONNECT_TIMEOUT_S = 10.0


class RayMissing(UserError):
    """`--ray` where Ray is not installed: one line saying what to install (exit status 2)."""


class ClusterGone(UserError):
    """The Ray cluster cannot be reached, or went away while the command ran (exit status 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Lost:
    """An item no worker could finish: every actor that took it died, and none is left."""

    reason: str


def require_ray():
    """The ray module, or RayMissing."""
    try:
        import ray
    except ImportError:
        raise RayMissing(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


def check_address(address: str) -> str:
    """`address` as given, refused in one line when it is empty (the commands' configs call this when built)."""
    if not address or not address.strip():
        raise UserError("--ray takes local, auto or the cluster's address (HOST:PORT, ray://HOST:10001)")
    return address.strip()


def _reachable(address: str) -> None:
    """A HOST:PORT nothing answers at is one line at once, not Ray's minute of retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # not HOST:PORT: Ray says what it makes of it
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterGone(f"no Ray cluster answers at {address} ({exc.strerror or exc})") from None


def connect(address: str, *, num_cpus: int, log_to_driver: bool = False, after: str = "") -> bool:
    """Connect this process to `address` (see the module); False when it was connected already (then the caller
    must not `disconnect` it). `after`: what the last-word line adds if Ray ends this process (see the module)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = check_address(address)
    # Ray's own log lines on this process: errors only (its notes on every start would crowd the command's
    # stderr, where our one-line errors go); the workers' output with `log_to_driver`
    kw: dict[str, Any] = {"log_to_driver": log_to_driver, "logging_level": "error"}
    if address == LOCAL:
        kw.update(address=LOCAL, num_cpus=num_cpus, object_store_memory=OBJECT_STORE_MB << 20,
                  include_dashboard=False)
    else:
        if address != AUTO:
            _reachable(address)
        kw["address"] = address
    try:
        ray.init(**kw)
    except ConnectionError as exc:  # `auto` with no cluster here, a head that refused us
        raise ClusterGone(f"cannot connect to the Ray cluster {address}: {first_line(exc)}") from None
    if not address.startswith("ray://"):  # a Ray Client's driver has no core worker here: Ray raises in Python
        _LastWord.start(ray.get_runtime_context().gcs_address, after)
    return True


def disconnect() -> None:
    """End this process's connection (and a `local` cluster with it)."""
    _LastWord.done()
    require_ray().shutdown()


# The watcher's program: standard library only, so that it starts in milliseconds. It reads its stdin (the pipe)
# to the end; without "done" there, it asks the cluster's head and prints the line. Its own session: Ctrl-C at the
# terminal is the command's to handle, not the watcher's.
_WATCHER = r"""
import os, socket, sys
address, after = sys.argv[1], sys.argv[2]
said = b""
while chunk := os.read(0, 64):
    said += chunk
if b"done" not in said:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        what = "the command's process ended abruptly (killed, or ended by Ray when its node left the cluster)"
    except (OSError, ValueError):
        what = f"the Ray cluster at {address} went away mid-run and Ray ended the command's process"
    os.write(2, f"error: {what}{'; ' + after if after else ''}\n".encode())
"""


class _LastWord:
    """The watcher of this process's connection (see the module): one at a time, as there is one connection."""

    pipe: int | None = None
    proc: subprocess.Popen | None = None

    @classmethod
    def start(cls, address: str, after: str) -> None:
        cls.done()
        read, write = os.pipe()  # not inherited by what this process starts later (Ray's own processes)
        try:
            cls.proc = subprocess.Popen([sys.executable, "-c", _WATCHER, address, after], stdin=read,
                                        stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read)
        cls.pipe = write
        atexit.unregister(cls.done)
        atexit.register(cls.done)

    @classmethod
    def done(cls) -> None:
        if cls.pipe is not None:
            os.write(cls.pipe, b"done")
            os.close(cls.pipe)
            cls.pipe = None
        if cls.proc is not None:
            cls.proc.wait()
            cls.proc = None


@contextmanager
def connected(address: str, *, num_cpus: int, log_to_driver: bool = False, after: str = "") -> Iterator[Any]:
    """The ray module, connected to `address` for the block (see the module)."""
    ours = connect(address, num_cpus=num_cpus, log_to_driver=log_to_driver, after=after)
    try:
        yield require_ray()
    finally:
        if ours:
            disconnect()


def spread(actor_cls: Any, n: int, *args: Any, num_cpus: float = 1, **kwargs: Any) -> list:
    """n actors of `actor_cls` (a class, made a Ray actor here) over the cluster's nodes."""
    ray = require_ray()
    remote = ray.remote(num_cpus=num_cpus, max_restarts=0)(actor_cls)
    return [remote.options(scheduling_strategy="SPREAD").remote(*args, **kwargs) for _ in range(n)]


def dispatch(actors: list, method: str, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """(item, result or Lost) once per item, as they finish (see the module)."""
    ray = require_ray()
    from ray import exceptions as rx

    todo, idle, flying = deque(items), list(actors), {}
    try:
        while todo or flying:
            while todo and idle:
                actor, item = idle.pop(), todo.popleft()
                flying[getattr(actor, method).remote(item)] = (actor, item)
            if not flying:  # every actor died: what is left is lost
                while todo:
                    yield todo.popleft(), Lost("no Ray worker left to play it")
                return
            (ref,), _ = ray.wait(list(flying), num_returns=1)
            actor, item = flying.pop(ref)
            try:
                result = ray.get(ref)
            except rx.RayTaskError as exc:  # our code's error in the worker: raised here as itself
                raise exc.as_instanceof_cause() from None
            except (rx.RayActorError, rx.ObjectLostError):  # the worker died: another one plays the item
                todo.appendleft(item)
                continue
            idle.append(actor)
            yield item, result
    except (rx.RaySystemError, rx.RpcError, ConnectionError) as exc:
        raise ClusterGone(f"the Ray cluster went away: {first_line(exc)}") from None


def end(actors: list, close: str | None = "close", timeout: float = 30.0) -> None:
    """End the actors: each one's `close` method first (an environment's sandbox or browser is shut down by its
    own code, not left behind), waited for `timeout` seconds in all, then the process; one already dead is no
    error."""
    ray = require_ray()
    from ray import exceptions as rx

    if close:
        refs = []
        for a in actors:
            try:
                refs.append(getattr(a, close).remote())
            except (rx.RayError, ConnectionError):  # an actor gone with its node takes no call
                pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
    for a in actors:
        try:
            ray.kill(a)
        except (rx.RayError, ConnectionError, ValueError):  # gone with its node already
            pass


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def worker_count(requested: int) -> int:
    """CPUs for a cluster started here: one per worker, at least this machine's."""
    return max(requested, os.cpu_count() or 1)
