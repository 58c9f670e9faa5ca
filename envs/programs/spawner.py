# The spawn helper: one small process per Python process that starts every sandboxed command.
# Forking the caller (a trainer holding a model in memory) for each command costs tens of ms;
# forking this helper costs well under one. Requests arrive on a SOCK_SEQPACKET socket (argv[1]) as
# JSON plus file descriptors, one of them the request's own status pipe: the helper writes
# "P<pid>\n" after the fork and "X<exit code>\n" when the child ends (or "E<error>\n"), then closes
# it, so each caller reads its own answers without any shared reader. The child closes every other
# descriptor (the socket too) before it runs the command.
import ctypes
import ctypes.util
import json
import os
import resource
import select
import signal
import socket
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.unshare.argtypes = [ctypes.c_int]
libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 0x20, 0x1000, 0x4000, 0x40000


def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, dst, fstype, flags, data=None):
    enc = lambda x: None if x is None else x.encode()  # noqa: E731
    check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {dst}")


def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build(req):
    """A fresh mount + network namespace with the read-only system view, then chroot (sandbox._preexec)."""
    v = req["view"]
    root = v["root"]
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if req.get("userns") else 0)), "unshare")
    if req.get("userns"):
        write("/proc/self/setgroups", b"deny")
        write("/proc/self/uid_map", b"0 %d 1" % req["outer_uid"])
        write("/proc/self/gid_map", b"0 %d 1" % req["outer_gid"])
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for d in v["dirs"]:
        os.mkdir(d)
    for link, target in v["symlinks"]:
        os.symlink(target, link)
    for src, dst, ro in v["binds"]:
        mount(src, dst, None, MS_BIND | MS_REC)
        mount(None, dst, None, MS_BIND | MS_REMOUNT | ro)
    for src, dst in v["devices"]:
        os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o666))
        mount(src, dst, None, MS_BIND)
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, v["tmp_opts"])
    mount(v["workspace"], root + "/workspace", None, MS_BIND)
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    os.chroot(root)
    os.chdir("/workspace")


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
    mode = req["mode"]
    if mode == "build":
        build(req)
    elif mode == "enter":
        check(libc.setns(fds["net"], CLONE_NEWNET), "setns net")
        check(libc.setns(fds["mnt"], CLONE_NEWNS), "setns mnt")
        os.chroot(req["root"])
        os.chdir("/workspace")
    elif req.get("cwd"):
        os.chdir(req["cwd"])
    if req.get("own_uid"):
        os.setgroups([])
        os.setgid(req["gid"])
        os.setuid(req["uid"])
    if mode == "kill":  # kill(-1) as the sandbox uid: every process of that uid
        os.kill(-1, signal.SIGKILL)
        os._exit(0)
    for res, value in req.get("rlimits", []):
        resource.setrlimit(res, (value, value))
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
        while children:
            try:
                pid, wstatus = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                answer(children.pop(pid), f"X{os.waitstatus_to_exitcode(wstatus)}", close=True)
        if sock in ready:
            try:
                msg, fdlist, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except OSError:
                return
            if not msg:
                return  # the caller is gone
            req = json.loads(msg)
            fds = dict(zip(req.pop("fd_names"), fdlist))
            status = fds.pop("status")
            try:
                pid = os.fork()
            except OSError as exc:
                answer(status, f"E{exc}", close=True)
                pid = None
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
