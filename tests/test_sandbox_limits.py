"""Attacks on the sandbox's limits (issue 11 item 6), each with small limits so it stays fast: parallel
writes past the disk quota, an inode flood, memory held by several processes at once, a tree too deep
to delete recursively, setuid binaries, and daemons that outlive their command or its timeout.

A test skips (with the reason) only where this machine lacks the kernel feature that enforces the limit;
envs/README.md says which mechanism enforces what, and what it falls back to."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

import envs
from envs.sandbox.leftovers import sweep_stale
from envs.sandbox.limits import Limits
from envs.sandbox.sandbox import Sandbox, isolation_mode
from envs.sandbox.tree_walk import remove_tree, tree_usage
from transcript.toolcalls import format_tool_call

pytestmark = pytest.mark.attack
SMALL = Limits(timeout_s=5.0, cpu_s=5, processes=48, file_size_bytes=8 << 20, workspace_bytes=16 << 20,
               workspace_inodes=600, total_memory_bytes=160 << 20)
MODES = ["full", "userns", "rlimits"]


@pytest.fixture
def box():
    with Sandbox(SMALL) as b:
        yield b


def _open(mode: str, limits: Limits = SMALL) -> Sandbox:
    if mode == "full" and os.geteuid() != 0:
        pytest.skip("full isolation needs root")
    b = Sandbox(limits, isolation=mode)
    probe = b.run("true")
    if probe.exit_code != 0:
        b.close()
        pytest.skip(f"{mode} isolation unavailable here: {probe.output.strip()[:200]}")
    return b


def needs_tmpfs(b: Sandbox) -> None:
    if b.workspace_fs != "tmpfs":
        pytest.skip("the workspace is not a tmpfs here (mounting one needs root with CAP_SYS_ADMIN)")


def test_parallel_writes_stop_at_the_disk_quota(box):
    needs_tmpfs(box)
    # 8 writers of 6 MB at once against a 16 MB quota (each file under the 8 MB file limit): a quota that
    # is polled lets them all finish (848 MB against 64 MB in the report); a tmpfs refuses the bytes.
    res = box.run("for i in $(seq 8); do head -c 6M /dev/zero > f$i.bin & done; wait; echo done")
    used, _ = tree_usage(str(box.workspace), 1 << 40, 1 << 30)
    assert used <= SMALL.workspace_bytes
    assert "No space left on device" in res.output and "done" in res.output


def test_an_inode_flood_stops_at_the_inode_quota(box):
    res = box.run(["python3", "-c", "import os\nfor i in range(5000):\n    open(f'e{i}', 'w').close()"])
    if box.workspace_fs == "tmpfs":  # the kernel refuses the file past the quota
        assert "No space left on device" in res.output
        assert len(os.listdir(box.workspace)) <= SMALL.workspace_inodes
    else:  # the polled quota catches it after the step
        assert res.killed == "workspace quota exceeded"


def test_memory_is_capped_across_all_processes_of_a_step(box):
    if box._group is None or "memory" not in box._group.enforced:
        pytest.skip("no writable cgroup memory controller here (needs root and cgroup v1 or a v2 subtree "
                    "with memory): only the per-process address-space limit applies")
    # Three processes of 100 MB each: every one is under the 1 GB per-process limit, together they are
    # far over the 160 MB cap of the sandbox.
    box.write_files({"hold.py": "import time\nx = bytearray(100 << 20)\ntime.sleep(1.5)\nprint('kept')\n"})
    res = box.run("for i in 1 2 3; do python3 hold.py & done; wait")
    assert res.output.count("kept") < 3 and "Killed" in res.output
    peak = _peak_memory(box._group.dirs)
    assert peak is None or peak <= SMALL.total_memory_bytes


def _peak_memory(dirs: list[str]) -> int | None:
    """The most memory the sandbox's cgroup has held (bytes), where the kernel reports it."""
    for path in dirs:
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                with open(f"{path}/{name}") as f:
                    return int(f.read())
            except (OSError, ValueError):
                continue
    return None


def test_a_deep_tree_is_removed_on_reset():
    env = envs.make("bash_exec_env", split="test")
    try:
        env.reset(options={"index": 0})
        box = env.unwrapped.box
        deep = "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').close()"
        env.step(format_tool_call("run", {"command": f"python3 -c \"{deep}\""}))
        root = box._dir
        assert (box.workspace / "d" / "d" / "d").is_dir()
        env.reset(options={"index": 1})  # closes the old sandbox: a recursive delete raised RecursionError here
        assert not root.exists()
    finally:
        env.close()


def test_the_fallback_cleanup_removes_any_depth(tmp_path):
    # The plain-directory workspace (no tmpfs) is deleted by remove_tree; made here, 3000 deep, with an
    # unreadable and a read-only directory on the way (the agent's own files may be any mode).
    top = tmp_path / "ws"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.mkdir("ws", dir_fd=fd)
    for i in range(3000):
        nxt = os.open("ws" if i == 0 else "d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
        os.mkdir("d", dir_fd=fd)
        if i == 1500:
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    os.chmod(top / "d", 0o500)
    assert tree_usage(str(top), 1 << 40, 1 << 30)[1] == 3001
    remove_tree(str(top))
    assert not top.exists()


def test_setuid_binaries_give_no_privileges(box):
    if not box.own_uid:
        pytest.skip("commands run as the caller's uid here (not root): there is no privilege to regain")
    planted = box.workspace / "rootid"
    shutil.copy("/usr/bin/id", planted)
    os.chown(planted, 0, 0)
    os.chmod(planted, 0o4755)  # a setuid-root binary, as a host path or a careless task could provide
    res = box.run("./rootid -u; /usr/bin/id -u")
    # the sandbox's uid, which a user namespace shows as its own 0 (a root one would show as 65534 there)
    inside = "0" if box.isolation == "userns" else str(box.uid)
    assert res.output.split() == [inside] * 2
    nnp = box.run([box.python, "-c", "import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"])
    assert nnp.output.strip() == "1"  # PR_GET_NO_NEW_PRIVS: no setuid binary anywhere raises privileges


def test_every_mount_inside_the_view_is_nosuid():
    if isolation_mode() not in ("full", "userns"):
        pytest.skip("kernel gives no mount namespaces here")
    with Sandbox(SMALL) as b:
        code = ("import os\nfor p in ['/usr', '/etc', '/bin', '/tmp', '/workspace', '/']:\n"
                "    print(p, bool(os.statvfs(p).f_flag & os.ST_NOSUID))")
        res = b.run([b.python, "-c", code])
        assert res.output.count("True") == 6, res.output


@pytest.mark.parametrize("spawner", ["1", "0"])
@pytest.mark.parametrize("mode", MODES)
def test_a_double_forked_daemon_with_closed_fds_dies_with_its_command(mode, spawner, monkeypatch):
    monkeypatch.setenv("LACHESIS_SANDBOX_SPAWNER", spawner)
    b = _open(mode)
    with b:
        daemon = "(setsid sh -c 'exec >/dev/null 2>&1 </dev/null; sleep 0.4; echo late > late.txt' &); echo left"
        res = b.run(daemon)
        assert res.output == "left\n" and not res.killed  # returned at once: nothing held its output
        time.sleep(0.8)
        assert not (b.workspace / "late.txt").exists()  # killed when its command ended


@pytest.mark.parametrize("mode", MODES)
def test_a_daemon_that_leaves_the_group_dies_with_a_timed_out_command(mode):
    b = _open(mode)
    with b:
        daemon = "setsid sh -c 'exec >/dev/null 2>&1 </dev/null; sleep 0.8; echo late > late.txt' & sleep 10"
        res = b.run(daemon, timeout_s=0.4)
        assert res.killed == "timeout"
        time.sleep(1.2)
        assert not (b.workspace / "late.txt").exists()


def test_a_daemon_does_not_outlive_the_episode_step():
    env = envs.make("bash_exec_env", split="test")
    try:
        env.reset(options={"index": 0})
        box = env.unwrapped.box
        env.step(format_tool_call("run", {"command": "nohup setsid sh -c 'sleep 0.4; touch late' "
                                                     ">/dev/null 2>&1 </dev/null &"}))
        time.sleep(0.8)
        assert not (box.workspace / "late").exists()
        if box.own_uid:  # not one process of the sandbox's uid is left
            out = subprocess.run(["ps", "-o", "pid=", "-u", str(box.uid)], capture_output=True, text=True).stdout
            assert out.strip() == ""
    finally:
        env.close()


def test_a_workspace_left_by_a_killed_process_is_swept():
    code = ("import os\nfrom envs.sandbox.sandbox import Sandbox\nb = Sandbox()\n"
            "print(b._dir, b.workspace_fs, ','.join(b._group.dirs) if b._group else '', flush=True)\n"
            "os.kill(os.getpid(), 9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    where, fs, *groups = out.stdout.split()
    groups = groups[0].split(",") if groups else []
    if fs != "tmpfs":
        remove_tree(where)
        pytest.skip("the workspace is not a tmpfs here: nothing is mounted to leak")
    assert os.path.ismount(os.path.join(where, "workspace"))  # kill -9: no close(), no atexit
    assert all(os.path.isdir(g) for g in groups)
    sweep_stale()
    assert not os.path.exists(where)
    assert not any(os.path.exists(g) for g in groups)
