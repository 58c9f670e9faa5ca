"""The sandbox's view of the system and how a command enters it: the one copy of what a command's process
does between fork and exec (cgroups, namespaces, mounts, uid, rlimits, no_new_privs), and the reaping
that kills whatever a command leaves behind.

Two processes run it: the spawn helper (spawner.py, a stand-alone program that imports this file as a
sibling module) in the child it forks for each command, and the sandbox itself (envs/sandbox/sandbox.py, and
namespaces.py for an episode's namespaces) in a preexec function when the helper is turned off. Stdlib only, raw syscalls through ctypes (Python 3.11
has no os.unshare/os.mount), and no state: each function is called in a freshly forked child, except
mount and umount (the sandbox's workspace) and the reaping (the spawn helper's own loop).
"""
import ctypes
import ctypes.util
import os
import resource
import signal

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38

try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
except (OSError, AttributeError):  # not Linux: the sandbox falls back to rlimits only
    libc = None


def available() -> bool:
    return libc is not None


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(x):
    return None if x is None else os.fsencode(x)


def mount(src, dst, fstype, flags, data=None):
    _check(libc.mount(_enc(src), _enc(dst), _enc(fstype), flags, _enc(data)), f"mount {dst}")


def umount(path):
    """Detach a mount (its files go with it at once, however deep the tree: the workspace's cleanup)."""
    _check(libc.umount2(_enc(path), MNT_DETACH), f"umount {path}")


def prctl(option, arg):
    _check(libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build(view, userns=False, outer_uid=0, outer_gid=0):
    """A fresh mount and network namespace (and user namespace when `userns`) holding the read-only
    system view, then chroot into it. `view` is the sandbox's view spec (Sandbox._view_spec):
    root, workspace, dirs, symlinks, binds [source, target, read-only flags], devices, tmp_opts.
    Every mount but the device nodes is nosuid and nodev: a setuid binary gives no one root inside."""
    root = view["root"]
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if userns else 0)), "unshare")
    if userns:
        # A process that changed its uid (root becoming the sandbox's uid) is not dumpable, and then its own
        # /proc/self files are root's: it could not write its maps. exec makes it dumpable again anyway.
        prctl(PR_SET_DUMPABLE, 1)
        _write("/proc/self/setgroups", b"deny")
        _write("/proc/self/uid_map", b"0 %d 1" % outer_uid)
        _write("/proc/self/gid_map", b"0 %d 1" % outer_gid)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for d in view["dirs"]:
        os.mkdir(d)
    for link, target in view["symlinks"]:
        os.symlink(target, link)
    for src, dst, ro in view["binds"]:
        mount(src, dst, None, MS_BIND | MS_REC)
        mount(None, dst, None, MS_BIND | MS_REMOUNT | ro)
    for src, dst in view["devices"]:
        os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o666))
        mount(src, dst, None, MS_BIND)
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, view["tmp_opts"])
    mount(view["workspace"], root + "/workspace", None, MS_BIND)
    mount(None, root + "/workspace", None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    os.chroot(root)
    os.chdir("/workspace")


def enter(net_fd, mnt_fd, root):
    """Join an episode's namespaces (full mode builds them once per episode), then chroot into its view."""
    _check(libc.setns(net_fd, CLONE_NEWNET), "setns net")
    _check(libc.setns(mnt_fd, CLONE_NEWNS), "setns mnt")
    os.chroot(root)
    os.chdir("/workspace")


def drop_to(uid, gid):
    """Become the sandbox's own uid: groups and gid first, since once the uid is dropped they cannot change."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def set_rlimits(rlimits):
    for res, value in rlimits:
        resource.setrlimit(res, (value, value))


def setup(req, net_fd=None, mnt_fd=None):
    """Everything a command's process does between fork (already in a session of its own) and exec,
    from the request the sandbox builds (Sandbox._request): join the episode's cgroups while still
    privileged; build or enter the namespaces; fork a waiter (contain) when asked; drop to the sandbox's
    uid; rlimits; no_new_privs."""
    proc_fd = open_proc() if req.get("contain") else None  # the waiter reads /proc from inside the view
    for procs in req.get("cgroups", ()):
        _write(procs, b"%d" % os.getpid())
    mode = req["mode"]
    own, uid, gid = req.get("own_uid"), req.get("uid", 0), req.get("gid", 0)
    userns = mode == "build" and req.get("userns", False)
    if userns and own:
        # Root in userns mode: become the unused uid first and map it to 0 inside, so what the command can
        # touch outside its view is decided by that uid, not by root's (/etc/shadow stays unreadable).
        drop_to(uid, gid)
        build(req["view"], True, uid, gid)
    elif mode == "build":
        build(req["view"], userns, req.get("outer_uid", 0), req.get("outer_gid", 0))
    elif mode == "enter":
        enter(net_fd, mnt_fd, req["root"])
    elif req.get("cwd"):
        os.chdir(req["cwd"])
    if req.get("pidns"):
        # contained like `contain`, by the kernel: the namespace dies with its pid 1; already pid 1 where the
        # spawn helper forked this child into a new namespace (pid_namespace_here)
        if os.getpid() != 1:
            pid_namespace()
    elif proc_fd is not None:
        contain(proc_fd)
    if own and not userns:
        drop_to(uid, gid)
    set_rlimits(req.get("rlimits", []))
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid or file-capability binary raises anyone's privileges


def pid_namespace():
    """Run the command in a PID namespace of its own, so it sees no other process: kill(pid, 0) on a host pid
    is ESRCH (without one, EPERM told it that the pid exists). unshare(CLONE_NEWPID) moves only the children to
    come: this process forks the command, pid 1 of the new namespace, and stays outside as its waiter, ending the
    way it ended. Orphans the command leaves are its own children, and when it ends the kernel kills whatever is
    left in the namespace (a double-forked daemon included), so no /proc scan is needed (`contain`). Why the
    command itself is pid 1 and not a waiter inside: each process hop on the way back costs a scheduling
    wake-up, and an init in between nearly doubles a namespace's cost per command (envs/README.md; the spawn
    helper, as root, saves this waiter too: pid_namespace_here). What pid 1 changes: a signal the command sends to itself is ignored unless it
    handles it (the kernel's rule for an init); the sandbox's kills come from outside and always land."""
    _check(libc.unshare(CLONE_NEWPID), "unshare pid")
    command = os.fork()
    if command == 0:
        return
    _quiet_waiter(keep=-1)
    status = None
    try:
        status = os.waitpid(command, 0)[1]
    except ChildProcessError:
        pass
    _end_like(status)


def pid_namespace_here():
    """The spawn helper's way, as root: its next child is pid 1 of a new PID namespace, with no waiter process
    in between (one process hop less per command than pid_namespace). Returns what to call right after that fork
    to put the helper's own namespace back for the children after it, or None where the kernel refuses (each
    child then makes its own: pid_namespace)."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    if libc.unshare(CLONE_NEWPID) != 0:
        os.close(own)
        return None

    def restore():
        try:
            _check(libc.setns(own, CLONE_NEWPID), "setns pid")
        finally:
            os.close(own)

    return restore


def _quiet_waiter(keep):
    """A waiter runs no Python handlers and holds no descriptor but `keep` (-1: none; the output pipe's EOF is
    the command's)."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: Python keeps its handlers
        pass
    os.closerange(0, max(keep, 0))
    os.closerange(keep + 1, 1 << 20)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _end_like(status):
    """Exit the way a wait status says the command ended (the caller sees its code or its signal)."""
    code = 127 if status is None else os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def contain(proc_fd):
    """Fork: the child goes on to become the command; this process stays as its waiter, a child
    subreaper, so every orphan the command leaves (a double-forked daemon) becomes its child; when the
    command exits it kills them all, then exits with the command's status. The spawn helper does the
    same for the commands it forks itself (spawner.py); this is for commands forked by the caller."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = os.fork()
    if pid == 0:
        return
    _quiet_waiter(keep=proc_fd)
    status = None
    try:
        status = os.waitpid(pid, 0)[1]
    except ChildProcessError:
        pass
    kill_children(proc_fd)
    _end_like(status)


def open_proc():
    return os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def children(proc_fd):
    """This (single-threaded) process's live and zombie children, read through a /proc descriptor."""
    me = os.getpid()
    try:
        fd = os.open(f"{me}/task/{me}/children", os.O_RDONLY, dir_fd=proc_fd)
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan every process's parent
        return [int(e) for e in os.listdir(proc_fd) if e.isdigit() and _parent(proc_fd, e) == me]
    try:
        return [int(x) for x in os.read(fd, 1 << 20).split()]
    finally:
        os.close(fd)


def _parent(proc_fd, pid):
    try:
        fd = os.open(f"{pid}/stat", os.O_RDONLY, dir_fd=proc_fd)
        try:
            return int(os.read(fd, 4096).rsplit(b")", 1)[1].split()[1])
        finally:
            os.close(fd)
    except (OSError, IndexError, ValueError):
        return None


def kill_children(proc_fd, keep=(), rounds=10000):
    """SIGKILL every child of this process but `keep`, and the children they leave to it (a subreaper
    inherits them), until none is left; reaps them. A child's pid cannot be reused before it is reaped,
    so no unrelated process is ever signalled."""
    for _ in range(rounds):
        strays = [k for k in children(proc_fd) if k not in keep]
        if not strays:
            return
        for k in strays:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        for k in strays:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass
