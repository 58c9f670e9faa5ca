"""The lake on object storage: every operation on a local root and on an s3:// root of the S3 emulator
(moto's server, started by tests/s3_emulator.py), and no lake module opening a path under the root."""
import json
import os
import sys
import threading

import pyarrow as pa
import pytest

from lake import Lake, LakeError
from lake.consumer import Consumer
from lake.maintenance import compact, history, vacuum
from lake.schemas import TABLES
from lake.store import Store, s3_options
from tests.lake_helpers import trajectory
from tests.s3_emulator import lake_root, s3_emulator  # noqa: F401 (fixtures)
from views.export import export_view

pytestmark = pytest.mark.s3


def count(lk, as_of=None, table="trajectories"):
    return lk.snapshot(as_of).sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def run_workload(root, tmp_path) -> dict:
    """Every lake operation once: init, append, group commit, snapshot, sql, change feed, consumer, compaction,
    vacuum with a registered consumer, history, export. Returns what it saw."""
    with pytest.raises(LakeError, match="no lake"):
        Lake.open(root)  # opening never creates
    lk = Lake.init(root)
    assert Lake.init(root).tables() == TABLES  # idempotent
    seen = {"init_versions": [lk.version(t) for t in TABLES]}
    for i in range(3):
        lk.append("trajectories", [trajectory(10 * i + k) for k in range(i + 1)])
    barrier = threading.Barrier(8)

    def call(i):
        barrier.wait()
        lk.append("trajectories", [trajectory(100 + i)])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    lk.append("rewards", [{"trajectory_id": "traj-0", "reward": 1.0, "success": True}])
    seen["time_travel"] = [count(lk, v) for v in range(4)]
    seen["count"] = count(lk)
    seen["group_versions"] = lk.version("trajectories") - 3
    consumer = Consumer(lk.table_set, "trainer", "trajectories", tmp_path / "consumer.json")
    batch = consumer.poll(consumer.load(), max_versions=2)
    cp = consumer.commit(batch, {"rows": batch.rows.num_rows})
    seen["consumed"] = (cp.offset, cp.state["rows"], consumer.load().offset, lk.consumers()["trainer"])
    before = lk.version("trajectories")
    seen["compact"] = compact(lk.table_set, "trajectories")["files_removed"]
    seen["feed_after_compaction"] = lk.changes("trajectories", before).num_rows  # compaction is no new data
    seen["feed_all"] = sorted(lk.changes("trajectories", 0).column("trajectory_id").to_pylist())
    gone = vacuum(lk.table_set, "trajectories", retention_hours=0)
    seen["vacuum"] = (gone["deleted"], gone["kept_for_consumers"])
    rest = consumer.poll(consumer.load())  # the consumer still reads what it had not consumed
    seen["rest"] = rest.rows.num_rows
    consumer.commit(rest, {})
    seen["vacuum_after"] = vacuum(lk.table_set, "trajectories", retention_hours=0)["deleted"]
    seen["count_after"] = count(lk)
    seen["ops"] = [h["operation"] for h in history(lk.table_set, "trajectories")][:2]
    manifest = export_view(lk, "trajectories", tmp_path / "export", format="jsonl")
    seen["export"] = (manifest["row_count"], manifest["lake_versions"]["trajectories"])
    seen["reopened"] = count(Lake.open(root))
    return seen


def test_every_lake_operation_on_a_local_and_an_s3_root(lake_root, tmp_path):
    seen = run_workload(lake_root, tmp_path)
    assert seen["init_versions"] == [0] * len(TABLES)
    assert seen["time_travel"] == [0, 1, 3, 6]
    assert seen["count"] == 14 and 1 <= seen["group_versions"] < 8  # 8 callers, fewer versions
    assert seen["consumed"][:3] == (2, 3, 2) and seen["consumed"][3] == {"trajectories": 2}
    assert seen["compact"] >= 4 and seen["feed_after_compaction"] == 0
    assert len(seen["feed_all"]) == 14 == len(set(seen["feed_all"]))
    # files of versions 1 and 2 are consumed and go; the later ones are kept for the consumer
    assert seen["vacuum"][0] == 2 and seen["vacuum"][1] >= 2
    assert seen["rest"] == 11
    assert seen["vacuum_after"] == seen["vacuum"][1]
    assert seen["count_after"] == 14
    assert seen["ops"][0] == "OPTIMIZE"
    assert seen["export"][0] == 14 and seen["reopened"] == 14
