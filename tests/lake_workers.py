"""Worker processes for the multi-process lake tests: `python -m tests.lake_workers ROLE LAKE ARGS...`."""
from __future__ import annotations

import json
import os
import random
import sys
import time

from lake import Lake
from lake.consumer import Consumer
from lake.maintenance import compact

BATCH = 20


def writer(root: str, name: str, batches: int) -> None:
    lk = Lake(root)
    w = lk.writer(name)
    for i in range(batches):
        rows = [{"trajectory_id": f"{name}-{i}-{k}", "messages": [{"role": "user", "content": f"{name} {i} {k}"}]}
                for k in range(BATCH)]
        w.append("trajectories", rows, seq=i)


def compactor(root: str, stop_file: str) -> None:
    lk = Lake(root)
    runs = 0
    while not os.path.exists(stop_file):
        compact(lk.table_set, "trajectories")
        runs += 1
        time.sleep(0.2)
    print(json.dumps({"compactions": runs}))


def reader(root: str, stop_file: str) -> None:
    lk = Lake(root)
    last, reads, bad = 0, 0, []
    while not os.path.exists(stop_file):
        snap = lk.snapshot()
        n, distinct = snap.sql("SELECT count(*), count(DISTINCT event_id) FROM trajectories").fetchall()[0]
        snap.close()
        reads += 1
        if n != distinct or n < last or n % BATCH:
            bad.append({"count": n, "distinct": distinct, "previous": last})
        last = max(last, n)
        time.sleep(0.05)
    print(json.dumps({"reads": reads, "bad": bad, "last": last}))


def consumer(root: str, checkpoint: str, seed: int) -> None:
    """Consume the change feed, dying at random (os._exit) before or after each checkpoint."""
    rng = random.Random(seed)
    lk = Lake(root)
    c = Consumer(lk.table_set, "test-consumer", "trajectories", checkpoint)
    cp = c.load()
    while True:
        batch = c.poll(cp, max_versions=3)
        if batch is None:
            print(json.dumps({"offset": cp.offset}))
            return
        ids = cp.state.get("ids", []) + batch.rows.column("trajectory_id").to_pylist()
        if rng.random() < 0.3:
            os._exit(17)  # crash after reading, before the checkpoint
        cp = c.commit(batch, {"ids": ids})
        if rng.random() < 0.15:
            os._exit(17)  # crash right after the checkpoint


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    {"writer": lambda: writer(args[0], args[1], int(args[2])),
     "compactor": lambda: compactor(args[0], args[1]),
     "reader": lambda: reader(args[0], args[1]),
     "consumer": lambda: consumer(args[0], args[1], int(args[2]))}[role]()
