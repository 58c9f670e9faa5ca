"""Several processes on one lake: writers, a compactor, a snapshot reader and a crashing consumer."""
import json
import os
import subprocess
import sys
from pathlib import Path

from lake import Lake
from lake.maintenance import compact

ROOT = Path(__file__).resolve().parent.parent
BATCHES = 50


def spawn(*args):
    return subprocess.Popen([sys.executable, "-m", "tests.lake_workers", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


def test_two_writers_with_compaction_and_a_reader(tmp_path):
    lk = Lake.init(tmp_path / "lake")
    stop = tmp_path / "stop"
    comp, read = spawn("compactor", lk.root, stop), spawn("reader", lk.root, stop)
    writers = [spawn("writer", lk.root, name, BATCHES) for name in ("w-a", "w-b")]
    assert all(w.wait(timeout=240) == 0 for w in writers)
    stop.touch()
    comp_out, read_out = json.loads(comp.communicate(timeout=60)[0]), json.loads(read.communicate(timeout=60)[0])
    assert comp.returncode == 0 and read.returncode == 0
    total = 2 * BATCHES * 20
    assert read_out["reads"] > 5 and read_out["bad"] == [], read_out
    assert comp_out["compactions"] >= 1
    n, distinct = lk.snapshot().sql("SELECT count(*), count(DISTINCT event_id) FROM trajectories").fetchall()[0]
    assert n == distinct == total
    # both writers' last sequences are recorded in the log
    assert lk.writer("w-a").committed_seq("trajectories") == BATCHES - 1
    assert lk.writer("w-b").committed_seq("trajectories") == BATCHES - 1


def test_consumer_killed_at_random_consumes_everything_exactly_once(tmp_path):
    lk = Lake.init(tmp_path / "lake")
    w = lk.writer("feed")
    expected = []
    for i in range(30):
        rows = [{"trajectory_id": f"t{i}-{k}", "messages": [{"role": "user", "content": "x"}]} for k in range(5)]
        expected += [r["trajectory_id"] for r in rows]
        w.append("trajectories", rows)
        if i % 7 == 6:
            compact(lk, "trajectories")  # compaction commits in the feed must not re-deliver rows
    checkpoint = tmp_path / "consumer.json"
    crashes, seed = 0, 1000
    while True:
        proc = spawn("consumer", lk.root, checkpoint, seed)
        out, _ = proc.communicate(timeout=60)
        seed += 1
        if proc.returncode == 0:
            break
        assert proc.returncode == 17
        crashes += 1
        assert crashes < 200
    state = json.loads(checkpoint.read_text())
    assert crashes >= 3
    assert sorted(state["state"]["ids"]) == sorted(expected)
    assert len(state["state"]["ids"]) == len(set(state["state"]["ids"]))
    assert state["offset"] == lk.version("trajectories")
    assert lk.consumers()["test-consumer"]["trajectories"] == state["offset"]
    assert os.path.exists(checkpoint)
