"""The sandbox's view of the system and how a command enters it: the one copy of the namespace, mount
and uid sequence.

Two processes run it: the spawn helper (spawner.py, a stand-alone program that imports this file as a
sibling module) in the child it forks for each command, and the sandbox itself (envs/sandbox.py) in a
preexec function when the helper is turned off. Stdlib only, raw syscalls through ctypes (Python 3.11
has no os.unshare/os.mount), and no state: each function is called in a freshly forked child.
"""
import ctypes
import ctypes.util
import os
import resource

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000

try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
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


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build(view, userns=False, outer_uid=0, outer_gid=0):
    """A fresh mount and network namespace (and user namespace when `userns`) holding the read-only
    system view, then chroot into it. `view` is the sandbox's view spec (Sandbox._view_spec):
    root, workspace, dirs, symlinks, binds [source, target, read-only flags], devices, tmp_opts."""
    root = view["root"]
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if userns else 0)), "unshare")
    if userns:
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
