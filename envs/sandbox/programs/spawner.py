# The spawn helper: one small process per Python process that starts every sandboxed command.
# Run as a script (`python -E -S spawner.py FD`), so its sibling mountns.py is importable (mountns.setup
# is what each child does before it execs the command).
# Forking the caller (a trainer holding a model in memory) for each command costs tens of ms;
# forking this helper costs well under one. Requests arrive on a SOCK_SEQPACKET socket (argv[1]) as
# JSON plus file descriptors, one of them the request's own status pipe: the helper writes
# "P<pid>\n" after the fork and "X<exit code>\n" when the child ends (or "E<error>\n"), then closes
# it, so each caller reads its own answers without any shared reader. The child closes every other
# descriptor (the socket too) before it runs the command.
import json
import os
import select
import signal
import socket
import sys

import mountns  # the sibling module: the one copy of the namespace, mount and uid sequence


def child(req, fds):
    os.setsid()
    stdin = fds.get("stdin")
    if stdin is None:
        stdin = os.open("/dev/null", os.O_RDONLY)
    out = fds.get("stdout")
    if out is None:
        out = os.open("/dev/null", os.O_WRONLY)
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    # Nothing of the helper's (its socket, other commands' pipes) stays open while this child is set up:
    # keep only the namespace descriptors `enter` needs.
    low = 3
    for fd in sorted(fds[k] for k in ("net", "mnt") if k in fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    if req["mode"] == "kill":  # kill(-1) as the sandbox uid: every process of that uid
        mountns.drop_to(req["uid"], req["gid"])
        os.kill(-1, signal.SIGKILL)
        os._exit(0)
    mountns.setup(req, fds.get("net"), fds.get("mnt"))
    if req.get("ready"):
        os.write(1, b"R")
    os.closerange(3, 1 << 20)
    for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):  # as a fresh process has them
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.execvpe(req["argv"][0], req["argv"], req["env"])


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the caller, which closes the socket
    # A child subreaper: every orphan a command leaves behind (a double-forked daemon with its descriptors
    # closed, a process that left the group a timeout kills) becomes this helper's child instead of init's.
    # It forks nothing but commands, so each child it did not fork is such a stray: whenever a child
    # exits, the strays are killed before the exit is reported, and a step's command never outlives it.
    proc_fd = None
    if mountns.available():
        mountns.prctl(mountns.PR_SET_CHILD_SUBREAPER, 1)
        proc_fd = mountns.open_proc()
    children = {}  # pid -> status fd

    def answer(fd, text, close=False):
        try:
            os.write(fd, text.encode() + b"\n")
        except OSError:
            pass
        if close:
            os.close(fd)

    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        while True:
            try:
                pid, wstatus = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            status = children.pop(pid, None)
            if proc_fd is not None:
                mountns.kill_children(proc_fd, keep=children)
            if status is not None:
                answer(status, f"X{os.waitstatus_to_exitcode(wstatus)}", close=True)
        if sock in ready:
            try:
                msg, fdlist, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except OSError:
                msg = b""
            if not msg:  # the caller is gone: so is everything it started
                if proc_fd is not None:
                    mountns.kill_children(proc_fd)
                return
            req = json.loads(msg)
            fds = dict(zip(req.pop("fd_names"), fdlist))
            status = fds.pop("status")
            # as root, the child is pid 1 of its own PID namespace from the fork on (no waiter in between)
            restore = mountns.pid_namespace_here() if req.get("pidns") and os.geteuid() == 0 else None
            try:
                pid = os.fork()
            except OSError as exc:
                answer(status, f"E{exc}", close=True)
                pid = None
            if pid != 0 and restore is not None:
                restore()
            if pid == 0:
                try:
                    child(req, fds)
                except BaseException as exc:
                    try:
                        os.write(1, f"sandbox: cannot start {req.get('argv', [''])[0]!r}: {exc}\n".encode())
                    except OSError:
                        pass
                os._exit(127)
            for fd in fds.values():
                os.close(fd)
            if pid is not None:
                children[pid] = status
                answer(status, f"P{pid}")


main()
