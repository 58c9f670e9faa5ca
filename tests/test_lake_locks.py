"""lake.locks: a table's commits are exclusive across processes, and a holder killed with -9 leaves no stale
lock behind (the kernel releases a flock with its holder)."""
import subprocess
import sys
import textwrap
import time

import pytest

from lake import Lake

HOLD = textwrap.dedent("""
    import sys, time
    from lake.locks import TableLocks
    with TableLocks(sys.argv[1]).hold("trajectories"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _holder(root, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.attack
def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    lk = Lake.init(tmp_path / "lake")
    p = _holder(lk.root, 600)
    p.kill()  # SIGKILL: no cleanup code runs
    p.wait()
    t0 = time.monotonic()
    lk.append("trajectories", [{"trajectory_id": "after-kill", "messages": []}])
    assert time.monotonic() - t0 < 10


def test_a_commit_waits_for_the_other_process(tmp_path):
    lk = Lake.init(tmp_path / "lake")
    p = _holder(lk.root, 1.5)
    t0 = time.monotonic()
    res = lk.append("trajectories", [{"trajectory_id": "waited", "messages": []}])
    waited = time.monotonic() - t0
    p.wait()
    assert res.rows == 1 and waited >= 1.0, waited
    lk.append("rewards", [{"trajectory_id": "waited", "reward": 1.0}])  # other tables: other locks
