"""Escape attempts against the sandbox, each contained (issue 5: write/read outside, hidden tests,
network, fork bomb, infinite loop, 1 GB write, 100 MB stdout), plus the scrubbed environment."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time

import pytest

import envs
from envs.sandbox.limits import Limits
from envs.sandbox.sandbox import Sandbox, isolation_mode
from transcript.toolcalls import format_tool_call

pytestmark = pytest.mark.attack  # each test is one escape tried against the sandbox
NAMESPACES = isolation_mode() in ("full", "userns")
needs_ns = pytest.mark.skipif(not NAMESPACES, reason="kernel gives no mount/network namespaces here")
FAST = Limits(timeout_s=2.0, cpu_s=3, processes=32, workspace_bytes=48 << 20)


@pytest.fixture
def box():
    with Sandbox(FAST) as b:
        yield b


def _uid_processes(uid: int) -> list[str]:
    """Live processes of a uid (zombies are dead already; this container's PID 1 may not reap them)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(pid)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return found


@needs_ns
def test_writes_outside_the_workspace_fail(box, tmp_path):
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)  # even a world-writable host directory is out of reach
    res = box.run(f"echo x > {target}; echo x > ../escaped.txt; echo x > /escaped.txt; "
                  "echo x > /usr/escaped.txt; echo x > /tmp/escaped.txt; echo in > inside.txt")
    assert not target.exists()
    assert not os.path.exists("/escaped.txt") and not os.path.exists("/usr/escaped.txt")
    assert not os.path.exists("/tmp/escaped.txt")  # the sandbox's /tmp is its own tmpfs
    assert (box.workspace / "inside.txt").read_text() == "in\n"
    assert "Read-only file system" in res.output or "No such file" in res.output


@needs_ns
def test_reads_outside_the_workspace_fail(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    res = box.run(f"cat {secret}; cat {__file__}; ls /root /home /work 2>&1; cat /etc/shadow")
    assert "TOP-SECRET-42" not in res.output
    assert "NAMESPACES" not in res.output  # this test file's own text
    assert res.exit_code != 0


def test_environment_is_scrubbed(box, monkeypatch):
    monkeypatch.setenv("LACHESIS_TEST_TOKEN", "tok-123")
    res = box.run("env")
    assert "tok-123" not in res.output and "PATH=" in res.output


def test_hidden_tests_cannot_be_read_or_modified():
    env = envs.make("python_debug_env", split="test")
    try:
        obs, info = env.reset(options={"index": 2})
        task = env.unwrapped.task
        hidden = task.checker["tests"]
        probe = hidden.splitlines()[3].strip()  # a line only the hidden tests contain
        mod = task.slots["mod"]
        # A "visible test" that searches every place outside the read-only system tree for the hidden text.
        spy = ("import os, time\n\ndef test_spy():\n    hits, t0 = [], time.time()\n"
               "    for top in ['/workspace', '/tmp', '/home', '/work', '/var', '/etc', '/dev']:\n"
               "        for root, dirs, files in os.walk(top):\n"
               "            if time.time() - t0 > 2:  # a bounded search (without a chroot the host is big)\n"
               "                break\n"
               "            for f in files:\n"
               "                try:\n"
               "                    p = os.path.join(root, f)\n"
               f"                    if ({probe[:6]!r} + {probe[6:]!r}) in open(p, errors='ignore').read(1 << 16):\n"
               "                        hits.append(p)\n"
               "                except OSError:\n"
               "                    pass\n"
               "    assert not hits, hits\n")
        observations = [
            env.step(format_tool_call("write_file", {"path": "test_spy.py", "content": spy}))[0],
            env.step(format_tool_call("run_tests", {}))[0],
            env.step(format_tool_call("read_file", {"path": "../hidden_tests.py"}))[0],
        ]
        assert "FAILED test_spy" not in observations[1]  # the search found nothing
        assert all(probe not in o for o in observations)
        # Planted "tests" and a module that fakes results and exits early score nothing.
        fake = "import sys\nprint('PASS ' * 10)\nsys.stdout.write('{\"test\": \"x\", \"ok\": true}\\n')\n" \
               "import os\nos._exit(0)\n"
        env.step(format_tool_call("write_file", {"path": "hidden_tests.py", "content": "def test_ok():\n    pass\n"}))
        env.step(format_tool_call("write_file", {"path": f"{mod}.py", "content": fake}))
        obs, reward, term, trunc, info = env.step(format_tool_call("submit", {}))
        assert reward == 0.0 and info["checks"]["total"] == 4
        assert probe not in obs
    finally:
        env.close()


@needs_ns
def test_no_network_not_even_the_host_loopback(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    code = ("import socket\nfor a in [('127.0.0.1', %d), ('1.1.1.1', 53)]:\n    try:\n"
            "        socket.create_connection(a, timeout=1); print('CONNECTED', a)\n"
            "    except OSError as e:\n        print('blocked', e)\n" % port)
    res = box.run(["python3", "-c", code])
    assert "CONNECTED" not in res.output and res.output.count("blocked") == 2
    socket.create_connection(("127.0.0.1", port), timeout=1).close()  # the host itself can connect
    server.close()


def test_infinite_loop_is_killed_by_the_timeout(box):
    start = time.monotonic()
    res = box.run("while true; do :; done", timeout_s=1.0)
    assert res.timed_out and res.killed == "timeout" and time.monotonic() - start < 3
    assert "timed out" in res.observation()


needs_own_uid = pytest.mark.skipif(os.geteuid() != 0, reason=(
    "the sandbox runs commands as the caller's uid here (not root): no uid-wide limit or sweep to check"))


@needs_own_uid
def test_fork_bomb_ends_within_limits(box):
    start = time.monotonic()
    box.run(":(){ :|:& };:; sleep 1", timeout_s=1.5)  # the sleep keeps the command alive while it forks
    assert time.monotonic() - start < 5
    # every orphan the bomb makes is reaped and killed by the spawn helper (a subreaper) as it appears,
    # RLIMIT_NPROC of the own uid bounds the rest, and when the command ends so does everything it started
    time.sleep(0.1)
    assert _uid_processes(box.uid) == []
    assert box.run("echo alive").output.strip() == "alive"


def test_the_process_limit_bites(box):
    res = box.run("for i in $(seq 100); do sleep 3 & done; wait", timeout_s=1.5)
    assert "Resource temporarily unavailable" in res.output or res.killed == "timeout"
    assert box.run("echo alive").output.strip() == "alive"


@needs_own_uid
def test_background_and_detached_processes_do_not_survive(box):
    box.run("sleep 60 & setsid sleep 61 & nohup sleep 62 >/dev/null 2>&1 &")
    # A process of the sandbox's uid in a session of its own, as a daemon the agent left behind would be
    # (started here so it surely outlives its command: run() may sweep a lingering one already).
    daemon = subprocess.Popen(["sleep", "63"], user=box.uid, group=box.gid, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert daemon.poll() is None
    box.close()
    assert daemon.wait(timeout=5) == -signal.SIGKILL
    time.sleep(0.1)
    assert _uid_processes(box.uid) == []


def test_one_gigabyte_write_stops_at_the_file_size_limit(box):
    res = box.run("head -c 1G /dev/zero > big.bin; echo status $?")
    size = (box.workspace / "big.bin").stat().st_size
    assert size <= FAST.file_size_bytes
    assert "status 153" in res.output  # 128 + SIGXFSZ


def test_filling_the_disk_with_many_files_hits_the_quota(box):
    res = box.run("for i in $(seq 1 40); do head -c 15M /dev/zero > f$i.bin; done", timeout_s=10)
    if box.workspace_fs == "tmpfs":  # the kernel refuses the write past the quota
        assert "No space left on device" in res.output
        assert sum(f.stat().st_blocks * 512 for f in box.workspace.iterdir()) <= FAST.workspace_bytes
    else:  # the polled quota kills the command
        assert res.killed == "workspace quota exceeded" and "quota" in res.observation()


def test_hundred_megabytes_of_stdout_is_truncated_and_stopped(box):
    start = time.monotonic()
    res = box.run("head -c 100M /dev/zero | tr '\\0' a")
    assert time.monotonic() - start < 3
    assert res.truncated and res.killed == "output flood"
    assert len(res.output) == FAST.output_bytes
    assert "[output truncated]" in res.observation()


def test_memory_limit_stops_a_huge_allocation(box):
    res = box.run(["python3", "-c", "x = bytearray(4 << 30)"])
    assert res.exit_code != 0 and "MemoryError" in res.output


@pytest.mark.parametrize("spawner", ["1", "0"])
@pytest.mark.parametrize("mode", ["full", "userns"])
def test_every_namespace_mode_contains_the_basics(mode, spawner, tmp_path, monkeypatch):
    monkeypatch.setenv("LACHESIS_SANDBOX_SPAWNER", spawner)  # "0": commands fork from this process
    if mode == "full" and os.geteuid() != 0:
        pytest.skip("full isolation needs root")
    # FAST's 2 s: a python3 start and a 1 s connect can take longer beside other work; containment is the subject
    box = Sandbox(Limits(timeout_s=20.0, cpu_s=10, processes=32, workspace_bytes=48 << 20), isolation=mode)
    try:
        probe = box.run("true")
    except (OSError, subprocess.SubprocessError) as exc:  # the kernel refuses this mode (forked here)
        box.close()
        pytest.skip(f"{mode} isolation unavailable: {exc}")
    if probe.exit_code != 0:  # the kernel refuses this mode (in the spawn helper's child)
        box.close()
        pytest.skip(f"{mode} isolation unavailable: {probe.output.strip()}")
    with box:
        os.chmod(tmp_path, 0o777)
        res = box.run(f"echo x > {tmp_path}/out; echo ok > in.txt; cat in.txt; "
                      "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=1)'")
        assert not (tmp_path / "out").exists() and "ok" in res.output and "unreachable" in res.output
        assert box.run("head -c 10M /dev/zero | tr '\\0' a").truncated


def test_a_killed_spawn_helper_is_replaced(box):
    from envs.sandbox.spawner import get_spawner
    from envs.sandbox.system_view import sandbox_python

    helper = get_spawner(sandbox_python())
    if helper is None:
        pytest.skip("spawn helper turned off")
    assert box.run("echo one").output == "one\n"
    helper.proc.kill()
    helper.proc.wait()
    time.sleep(0.05)
    assert box.run("echo two").output == "two\n"
    assert get_spawner(sandbox_python()) is not helper


def test_a_daemon_left_behind_cannot_change_the_result_during_scoring():
    env = envs.make("bash_exec_env", split="test")
    try:
        env.reset(options={"index": 0})  # template "create": the check reads the file the agent wrote
        task = env.unwrapped.task
        path = task.checker["checks"][0]["path"]
        if not env.unwrapped.box.own_uid:
            pytest.skip("needs an own uid to sweep")
        # Correct file now, but a detached process would break it while the checker runs.
        daemon = f"echo {task.slots['w']} > {path}; setsid sh -c 'sleep 0.3; echo broken > {path}' >/dev/null 2>&1 &"
        env.step(format_tool_call("run", {"command": daemon}))
        time.sleep(0.05)
        obs, reward, *_ = env.step(format_tool_call("submit", {}))
        time.sleep(0.5)
        assert reward == 1.0
        assert (env.unwrapped.box.workspace / path).read_text() != "broken\n"  # the daemon was killed
    finally:
        env.close()


@needs_ns
def test_host_processes_cannot_be_enumerated_with_kill_zero(box):
    """Issue 26 item 15: kill(pid, 0) answers EPERM for a pid that exists and ESRCH for one that does not, so a
    command could list the host's processes; in a PID namespace of its own it finds only itself."""
    from envs.sandbox.sandbox import pid_namespaces

    if not pid_namespaces():
        pytest.skip("kernel feature absent: no PID namespace for the sandbox here (unshare(CLONE_NEWPID) refused)")
    code = ("import os, sys\nfound = []\nfor pid in range(1, int(sys.argv[1])):\n"
            "    try:\n        os.kill(pid, 0)\n    except ProcessLookupError:\n        continue\n"
            "    except PermissionError:\n        pass\n    found.append(pid)\nprint(found)")
    res = box.run(["python3", "-c", code, str(os.getpid() + 2000)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "[1]"  # itself, pid 1 of its namespace; not the test process nor anything else
