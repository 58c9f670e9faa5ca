import json
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from lake import Lake, LakeError, RecordError
from lake.envelope import uuid7_array
from lake.schemas import TABLES
from tests.lake_helpers import trajectory


@pytest.fixture
def lake(tmp_path):
    return Lake.init(tmp_path / "lake")


def count(lk, table="trajectories", as_of=None):
    return lk.snapshot(as_of).sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def test_init_creates_every_table_and_is_idempotent(tmp_path):
    lk = Lake.init(tmp_path / "l")
    assert lk.tables() == TABLES
    assert Lake.init(tmp_path / "l").tables() == TABLES
    assert all(lk.version(t) == 0 for t in TABLES)


def test_open_missing_lake_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(LakeError, match="lake init"):
        Lake(tmp_path / "nowhere")
    with pytest.raises(LakeError, match="no lake at .*nowhere"):
        Lake.open(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()  # opening never creates
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "env"))
    with pytest.raises(LakeError, match="env"):
        Lake.open()
    assert Lake.init().root == Lake.open().root == tmp_path / "env"  # None resolves through $LAKE_ROOT


@pytest.mark.parametrize("as_of", ["trajectories=x", "{not json", "yesterday", {"trajectories": "x"}])
def test_bad_as_of_is_a_lake_error(lake, as_of):
    from lake.as_of import AsOfError

    with pytest.raises(AsOfError, match="as-of") as e:
        lake.snapshot(as_of)
    assert isinstance(e.value, LakeError)


def test_append_fills_envelope_and_keeps_unknown_fields(lake):
    res = lake.append("trajectories", [trajectory(1, surprise={"a": 1}), trajectory(2)])
    assert (res.rows, res.version, res.duplicate) == (2, 1, False)
    rows = lake.snapshot().sql(
        "SELECT event_id, event_type, schema_version, source, content_hash, day, raw, messages "
        "FROM trajectories ORDER BY trajectory_id").fetchall()
    ids = [r[0] for r in rows]
    assert len(set(ids)) == 2 and all(len(i) == 36 and i[14] == "7" for i in ids)
    assert rows[0][1] == "trajectory" and rows[0][2] == 1
    assert rows[0][3].startswith("lake-")
    assert len(rows[0][4]) == 32 and rows[0][4] != rows[1][4]
    assert json.loads(rows[0][6]) == {"surprise": {"a": 1}}
    assert rows[1][6] is None
    call = rows[0][7][1]["tool_calls"][0]
    assert call["name"] == "run" and json.loads(call["arguments"]) == {"command": "wc -l < file1.txt"}


def test_same_content_under_another_id_hashes_the_same(lake):
    a, b = trajectory(1), trajectory(1)
    b["trajectory_id"] = "other"
    lake.append("trajectories", [a, b, trajectory(2)])
    hashes = dict(lake.snapshot().sql("SELECT trajectory_id, content_hash FROM trajectories").fetchall())
    assert hashes["other"] == hashes["traj-1"] != hashes["traj-2"]


def test_occurred_at_sets_the_day_partition(lake):
    lake.append("trajectories", [trajectory(1, occurred_at="2025-03-04T10:00:00Z"), trajectory(2, occurred_at=1.7e9)])
    days = {r[0] for r in lake.snapshot().sql("SELECT day FROM trajectories").fetchall()}
    assert days == {"2025-03-04", "2023-11-14"}
    assert sorted(p.name for p in (lake.root / "trajectories").glob("day=*")) == ["day=2023-11-14", "day=2025-03-04"]


@pytest.mark.parametrize("bad,field", [
    ({"messages": []}, "trajectory_id"),
    ({"trajectory_id": "x"}, "messages"),
    ({"trajectory_id": "x", "messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"trajectory_id": "x", "messages": [], "reward": "high"}, "reward"),
    ({"trajectory_id": "x", "messages": [], "success": 1}, "success"),
    ({"trajectory_id": "x", "messages": "hello"}, "messages"),
    ({"trajectory_id": "x", "messages": [{"role": "assistant", "tool_calls": [{"name": 3}]}]},
     "messages[0].tool_calls[0].name"),
    ({"trajectory_id": "x", "messages": [], "occurred_at": "yesterday"}, "occurred_at"),
    ({"trajectory_id": 5, "messages": []}, "trajectory_id"),
])
def test_bad_records_name_the_field_and_write_nothing(lake, bad, field):
    with pytest.raises(RecordError) as exc:
        lake.append("trajectories", [trajectory(1), bad])
    assert exc.value.index == 1 and exc.value.field == field
    assert lake.version("trajectories") == 0


def test_unknown_table_is_rejected(lake):
    with pytest.raises(LakeError, match="unknown table"):
        lake.append("nope", [{}])


def test_replayed_writer_batch_adds_no_rows(lake):
    w = lake.writer("importer-1")
    assert not w.append("trajectories", [trajectory(1)], seq=1).duplicate
    again = w.append("trajectories", [trajectory(1)], seq=1)
    older = w.append("trajectories", [trajectory(9)], seq=0)
    assert again.duplicate and older.duplicate and again.rows == 0
    assert not w.append("trajectories", [trajectory(2)], seq=2).duplicate
    assert count(lake) == 2
    # A new process (a new Lake object) with the same writer id sees the committed sequence in the Delta log.
    fresh = Lake(lake.root).writer("importer-1")
    assert Lake(lake.root).delta_table("trajectories").transaction_version("importer-1") == 2
    assert fresh.append("trajectories", [trajectory(2)], seq=2).duplicate
    assert fresh.append("trajectories", [trajectory(3)]).seq == 3  # auto sequence continues after the log's
    assert count(lake) == 3


def test_group_commit_merges_concurrent_callers_into_few_versions(lake):
    lake.append("trajectories", [trajectory(0)])  # warm the committer
    start = lake.version("trajectories")
    results, barrier = [], threading.Barrier(40)

    def call(i):
        barrier.wait()
        results.append(lake.append("trajectories", [trajectory(i)]))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(1, 41)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    versions = lake.version("trajectories") - start
    assert len(results) == 40 and all(r.version is not None for r in results)
    assert versions < 40 / 4, versions  # merged: far fewer commits than callers
    assert count(lake) == 41
    # every caller returned only after its rows were visible
    assert all(r.version <= lake.version("trajectories") for r in results)


def test_time_travel_snapshot_counts(lake):
    for i in range(3):
        lake.append("trajectories", [trajectory(10 * i + k) for k in range(i + 1)])
    assert [count(lake, as_of=v) for v in range(4)] == [0, 1, 3, 6]
    assert [count(lake, as_of=text) for text in ("2", "trajectories=2", '{"trajectories": 2}')] == [3, 3, 3]
    snap = lake.snapshot({"trajectories": 2})
    assert snap.versions["trajectories"] == 2 and snap.versions["skills"] == 0
    with pytest.raises(LakeError):
        lake.snapshot({"trajectories": 99})


def test_change_feed_skips_compaction(lake):
    from lake.maintenance import compact

    for i in range(5):
        lake.append("trajectories", [trajectory(i)])
    res = compact(lake.table_set, "trajectories")
    assert res["files_removed"] == 5
    lake.append("trajectories", [trajectory(5)])
    latest = lake.version("trajectories")
    assert lake.changes("trajectories", 0).num_rows == 6
    assert lake.changes("trajectories", 5, 6).num_rows == 0  # version 6 is the compaction
    assert lake.changes("trajectories", 6).column("trajectory_id").to_pylist() == ["traj-5"]
    assert lake.changes("trajectories", 2, 4).column("_commit_version").to_pylist() == [3, 4]
    assert latest == 7 and count(lake) == 6


def test_vacuum_keeps_files_a_consumer_still_needs(lake):
    from lake.maintenance import compact, vacuum

    for i in range(4):
        lake.append("trajectories", [trajectory(i)])
    lake.register_consumer("trainer", {"trajectories": 2})
    compact(lake.table_set, "trajectories")
    res = vacuum(lake.table_set, "trajectories", retention_hours=0)
    assert res["deleted"] == 2 and res["kept_for_consumers"] == 2
    assert lake.changes("trajectories", 2).num_rows == 2  # the consumer can still read versions 3 and 4
    lake.register_consumer("trainer", {"trajectories": lake.version("trajectories")})
    assert vacuum(lake.table_set, "trajectories", retention_hours=0)["deleted"] == 2
    assert count(lake) == 4


def test_schema_evolution_adds_a_column_without_rewriting(lake, monkeypatch):
    from lake import schemas

    lake.append("rewards", [{"trajectory_id": "a", "reward": 1.0}])
    old_files = sorted(p.name for p in (lake.root / "rewards").rglob("*.parquet"))
    new_fields = schemas.PAYLOADS["rewards"] + [pa.field("judge", pa.string())]
    monkeypatch.setitem(schemas.PAYLOADS, "rewards", new_fields)
    monkeypatch.setitem(schemas.SCHEMA_VERSIONS, "rewards", 2)
    fresh = Lake(lake.root)
    fresh.append("rewards", [{"trajectory_id": "b", "reward": 0.0, "judge": "gpt"}])
    rows = fresh.snapshot().sql("SELECT trajectory_id, judge, schema_version FROM rewards ORDER BY 1").fetchall()
    assert rows == [("a", None, 1), ("b", "gpt", 2)]
    assert set(old_files) <= {p.name for p in (lake.root / "rewards").rglob("*.parquet")}


def test_uuid7_layout():
    ids = uuid7_array(5000).to_pylist()
    assert len(set(ids)) == 5000
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)
    assert ids == sorted(ids)


def test_uuid7_ids_sort_in_creation_order_across_calls_and_kinds(monkeypatch):
    """One monotonic rule (ground/ids.py) for the lake's event ids and every other id: later calls, single ids
    between them, a clock that stands still or goes back, and a full counter (it borrows the next ms) never sort
    before what came earlier (before: the lake's counter restarted at 0 in each call, so two calls in one ms sorted
    at random by their random tails, and ingest's ids kept a rule of their own)."""
    import time
    import uuid

    from ground import ids
    from ground.ids import COUNTER_BITS, uuid7

    now = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: now)  # a clock that does not move
    made = [*uuid7_array(3).to_pylist(), uuid7(), *uuid7_array(2).to_pylist(), uuid7()]
    monkeypatch.setattr(time, "time_ns", lambda: now - 10**9)  # a clock set back a second
    made += [uuid7(), *uuid7_array(2).to_pylist()]
    ids._last = max(ids._last, ((now // 10**6) << COUNTER_BITS) | ((1 << COUNTER_BITS) - 2))  # only ever up
    made += [*uuid7_array(3).to_pylist(), uuid7()]  # the counter runs over: the next ms
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in made)
    assert int(made[-1][:8] + made[-1][9:13], 16) == now // 10**6 + 1


def test_views_dir_sql_files_become_views(tmp_path):
    views = tmp_path / "views"
    views.mkdir()
    (views / "b_good.sql").write_text("SELECT trajectory_id FROM a_base WHERE reward > 0.5")
    (views / "a_base.sql").write_text("SELECT * FROM trajectories;")
    (views / "broken.sql").write_text("SELECT nope FROM trajectories")
    lk = Lake.init(tmp_path / "l", views_dir=views)
    lk.append("trajectories", [trajectory(i) for i in range(10)])
    snap = lk.snapshot()
    assert set(snap.views) == {"a_base", "b_good"} and "broken" in snap.view_errors
    assert snap.sql("SELECT count(*) FROM b_good").fetchall()[0][0] == 4


def test_lake_module_never_imports_torch(tmp_path):
    code = ("import sys, lake, lachesis.cli; from lake import Lake; "
            f"Lake.init({str(tmp_path / 'x')!r}).snapshot(); "
            "bad = [m for m in ('torch', 'transformers', 'fastapi') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
