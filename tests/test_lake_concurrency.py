"""Several processes on one lake: writers, a compactor, a snapshot reader and a crashing consumer; on a local
root and on an s3:// root of the S3 emulator (tests/s3_emulator.py: the workers inherit its AWS_* variables)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lake import Lake
from tests.fault_figures import record

ROOT = Path(__file__).resolve().parent.parent
BATCHES = 50
S3_BATCHES = 20  # on the S3 emulator (moto: a Python server, ~10x slower per commit than a local disk)


def spawn(*args):
    return subprocess.Popen([sys.executable, "-m", "tests.lake_workers", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.s3
def test_two_writers_with_compaction_and_a_reader(any_lake_root, tmp_path):
    lk = Lake.init(any_lake_root)
    batches = S3_BATCHES if any_lake_root.startswith("s3://") else BATCHES
    stop = tmp_path / "stop"
    comp, read = spawn("compactor", lk.root, stop), spawn("reader", lk.root, stop)
    writers = [spawn("writer", lk.root, name, batches) for name in ("w-a", "w-b")]
    assert all(w.wait(timeout=240) == 0 for w in writers)
    stop.touch()
    comp_out, read_out = json.loads(comp.communicate(timeout=60)[0]), json.loads(read.communicate(timeout=60)[0])
    bad = read_out["bad"]  # the reader's own checks of each snapshot: a row twice, fewer rows than before, half a batch
    record("snapshot reads during 2 writers + compaction", tried=read_out["reads"], unit="reads",
           duplicate_reads=sum(b["count"] != b["distinct"] for b in bad),
           missing_reads=sum(b["count"] < b["previous"] for b in bad), partial_reads=sum(b["count"] % 20 != 0 for b in bad))
    assert comp.returncode == 0 and read.returncode == 0
    total = 2 * batches * 20
    assert read_out["reads"] > 5 and read_out["bad"] == [], read_out
    assert comp_out["compactions"] >= 1
    n, distinct = lk.snapshot().sql("SELECT count(*), count(DISTINCT event_id) FROM trajectories").fetchall()[0]
    record("rows after 2 writers + compaction", tried=total, unit="rows written", lost=total - distinct,
           duplicated=n - distinct)
    assert n == distinct == total
    # both writers' last sequences are recorded in the log (the app transaction the writer checks before a commit)
    assert lk.delta_table("trajectories").transaction_version("w-a") == batches - 1
    assert lk.delta_table("trajectories").transaction_version("w-b") == batches - 1


@pytest.mark.s3
def test_consumer_killed_at_random_consumes_everything_exactly_once(any_lake_root, tmp_path):
    """Writer and compactor run while the consumer is killed and restarted over and over."""
    lk = Lake.init(any_lake_root)
    stop = tmp_path / "stop"
    writer = spawn("writer", lk.root, "feed", 40)
    comp = spawn("compactor", lk.root, stop)
    checkpoint = tmp_path / "consumer.json"
    crashes, seed, finished = 0, 1000, False
    while True:
        writer_done = writer.poll() is not None
        if writer_done and not stop.exists():
            stop.touch()
            comp.communicate(timeout=60)
        proc = spawn("consumer", lk.root, checkpoint, seed)
        proc.communicate(timeout=60)
        seed += 1
        if proc.returncode == 0 and writer_done and comp.returncode is not None:
            break  # a clean pass after every writer and the compactor stopped: fully caught up
        if proc.returncode != 0:
            assert proc.returncode == 17
            crashes += 1
        assert crashes < 300
    assert writer.returncode == 0 and comp.returncode == 0
    expected = [f"feed-{i}-{k}" for i in range(40) for k in range(20)]
    state = json.loads(checkpoint.read_text())
    ids = state["state"]["ids"]
    record(f"consumer killed at random ({crashes} crashes) during writes + compaction", tried=len(expected),
           unit="rows", consumed_twice=len(ids) - len(set(ids)), skipped=len(set(expected) - set(ids)))
    assert crashes >= 3
    assert len(ids) == len(set(ids)) == len(expected) and set(ids) == set(expected)
    assert state["offset"] == lk.version("trajectories")
    ops = {h["operation"] for h in lk.delta_table("trajectories").history()}
    assert "OPTIMIZE" in ops  # compaction commits really were in the feed
    assert lk.consumers()["test-consumer"]["trajectories"] == state["offset"]
