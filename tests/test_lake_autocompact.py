"""Automatic compaction beside a streaming writer and a change-feed consumer; compactions never overlap."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lake import Lake
from lake.autocompact import AutoCompactor, CompactThresholds
from lake.maintenance import compact, compaction_lock
from tests.lake_helpers import trajectory

ROOT = Path(__file__).resolve().parent.parent
DAYS = ("2026-11-01", "2026-11-02")
SMALL = CompactThresholds(small_file_bytes=1024 * 1024, min_small_files=5, min_small_bytes=64 * 1024 * 1024,
                          closed_min_small_files=5, interval_s=0.02, vacuum_interval_s=None)


def batch(i, size=3):
    return [trajectory(i * size + k, occurred_at=f"{DAYS[i % 2]}T10:00:{k:02d}Z") for k in range(size)]


def live_files(lk):
    return lk.table_set.partition_files("trajectories")


def all_rows(lk):
    return sorted(lk.snapshot().sql("SELECT event_id, content_hash FROM trajectories").fetchall())


@pytest.fixture
def lake(tmp_path):
    return Lake.init(tmp_path / "lake")


def test_small_files_of_a_day_are_compacted_once_they_cross_the_threshold(lake):
    compactor = AutoCompactor(lake.table_set, SMALL)
    for i in range(8):  # 4 files per day: under the threshold of 5
        lake.append("trajectories", batch(i))
    assert compactor.due() == {} and compactor.maybe_compact() == []
    lake.append("trajectories", batch(8))  # the 5th small file of DAYS[0]
    before = all_rows(lake)
    assert compactor.due() == {"trajectories": [DAYS[0]]}
    done = compactor.maybe_compact()
    assert [(d["day"], d["files_removed"], d["files_added"]) for d in done] == [(DAYS[0], 5, 1)]
    assert {day: len(sizes) for day, sizes in live_files(lake).items()} == {DAYS[0]: 1, DAYS[1]: 4}
    assert all_rows(lake) == before  # the same rows, ids and hashes
    ops = [h["operation"] for h in lake.delta_table("trajectories").history(1)]
    assert ops == ["OPTIMIZE"]


def test_a_day_streaming_has_moved_on_from_is_compacted_from_two_small_files(lake):
    compactor = AutoCompactor(lake.table_set, CompactThresholds(min_small_files=5))
    for i in range(4):  # days alternate: 2 small files each
        lake.append("trajectories", batch(i))
    assert compactor.due() == {"trajectories": [DAYS[0]]}  # DAYS[1] is the newest: it waits for 5


def test_background_compaction_beside_a_writer_and_a_consumer(lake):
    """The writer's 60 appends all land while the compactor runs; a consumer reading the change feed in
    steps (N, M] sees every row exactly once although compactions re-package rows all along."""
    appends, errors, seen = 60, [], []
    done = threading.Event()

    def write():
        try:
            for i in range(appends):
                lake.append("trajectories", batch(i))
        except BaseException as exc:  # recorded for the assertion below
            errors.append(exc)
        finally:
            done.set()

    def consume():
        offset = 0
        while True:
            finished = done.is_set()
            latest = lake.version("trajectories")
            if latest > offset:
                seen.extend(lake.changes("trajectories", offset, latest).column("trajectory_id").to_pylist())
                offset = latest
            elif finished:
                return
            time.sleep(0.01)

    with AutoCompactor(lake.table_set, SMALL) as compactor:
        threads = [threading.Thread(target=write), threading.Thread(target=consume)]
        [t.start() for t in threads]
        [t.join(timeout=240) for t in threads]
        while compactor.due():  # let the last pass catch up with the last appends
            time.sleep(0.05)
    assert errors == []
    expected = [f"traj-{n}" for n in range(appends * 3)]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))
    history = lake.delta_table("trajectories").history()
    optimize = sorted(h["version"] for h in history if h["operation"] == "OPTIMIZE")
    writes = sorted(h["version"] for h in history if h["operation"] == "WRITE")
    assert optimize and any(writes[0] < v < writes[-1] for v in optimize)  # compacted while the writer ran
    assert compactor.compactions and all(len(s) < SMALL.min_small_files for s in live_files(lake).values())
    n, distinct = lake.snapshot().sql("SELECT count(*), count(DISTINCT event_id) FROM trajectories").fetchall()[0]
    assert n == distinct == appends * 3


def test_a_compaction_waits_for_the_one_holding_the_table(lake):
    for i in range(4):
        lake.append("trajectories", batch(i))
    finished = threading.Event()
    with compaction_lock(lake.table_set, "trajectories"):
        t = threading.Thread(target=lambda: (compact(lake.table_set, "trajectories"), finished.set()))
        t.start()
        assert not finished.wait(0.5)  # blocked while the lock is held
    t.join(timeout=60)
    assert finished.is_set()


def test_two_compacting_processes_beside_a_writer_never_duplicate_rows(tmp_path):
    """delta-rs 1.6.6 lets two compactions of one version both commit (rows doubled); the lock prevents it."""
    lk = Lake.init(tmp_path / "lake")
    stop = tmp_path / "stop"

    def spawn(*args):
        return subprocess.Popen([sys.executable, "-m", "tests.lake_workers", *map(str, args)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)

    compactors = [spawn("compactor", lk.root, stop) for _ in range(2)]
    writer = spawn("writer", lk.root, "w", 30)
    assert writer.wait(timeout=240) == 0
    stop.touch()
    assert all(c.wait(timeout=60) == 0 for c in compactors)
    n, distinct = lk.snapshot().sql("SELECT count(*), count(DISTINCT event_id) FROM trajectories").fetchall()[0]
    assert n == distinct == 30 * 20
