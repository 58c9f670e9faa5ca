"""The lake's own write path: day partitions written by lake.data_files, content hashes, add-action stats."""
import datetime as dt
import json

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lake import Lake
from lake.delta import commit_actions
from lake.envelope import IDENTITY_COLUMNS, add_envelope, content_hashes, with_content_hash
from lake.records import validate_records
from lake.schemas import payload_schema
from tests.lake_helpers import trajectory

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]


@pytest.fixture
def lake(tmp_path):
    return Lake.init(tmp_path / "lake")


def interleaved(n):
    """Records whose days alternate row by row, at microsecond times that are not on a millisecond."""
    return [trajectory(i, occurred_at=f"{DAYS[i % 3]}T{10 + i // 60:02d}:{i % 60:02d}:00.123456Z") for i in range(n)]


def payload_of(records):
    rows = validate_records("trajectories", records)
    return pa.Table.from_pylist([r.payload for r in rows], schema=payload_schema("trajectories"))


def test_content_hash_is_duckdbs_two_hash_formula():
    """The salted half is derived in numpy from DuckDB's first hash: the values must stay DuckDB's own."""
    payload = payload_of([trajectory(i) for i in range(300)])
    content = payload.select([c for c in payload.column_names if c not in IDENTITY_COLUMNS])
    con = duckdb.connect()
    con.register("p", content)
    row = "struct_pack(" + ", ".join(f'"{c}" := "{c}"' for c in content.column_names) + ")"
    expected = con.sql(f"SELECT printf('%016x%016x', hash({row}), hash({row}, 'lachesis')) FROM p").fetchall()
    assert content_hashes(payload).to_pylist() == [h for (h,) in expected]


def test_hash_added_per_partition_equals_the_whole_tables(lake):
    payload = payload_of(interleaved(30))
    whole = add_envelope("trajectories", payload, sources="s", schema_version=1, event_types="trajectory")
    later = with_content_hash("trajectories", add_envelope("trajectories", payload, sources="s", schema_version=1,
                                                           event_types="trajectory", hashed=False))
    assert later.column_names == whole.column_names
    assert later.column("content_hash").equals(whole.column("content_hash"))
    part = later.drop_columns(["content_hash", "day"]).slice(7, 5)  # a partition: some rows, no day column
    assert with_content_hash("trajectories", part).column("content_hash").to_pylist() == \
        whole.column("content_hash").to_pylist()[7:12]


def test_interleaved_days_become_one_file_per_day_in_arrival_order(lake):
    records = interleaved(60)
    res = lake.append("trajectories", records)
    adds = [a["add"] for a in commit_actions(lake.table_path("trajectories"), res.version) if "add" in a]
    assert sorted(a["partitionValues"]["day"] for a in adds) == DAYS
    for add in adds:
        day = add["partitionValues"]["day"]
        table = pq.read_table(lake.table_path("trajectories") / add["path"])
        assert "day" not in table.column_names  # the partition value lives in the path, as delta-rs writes it
        expected = [r["trajectory_id"] for r in records if r["occurred_at"].startswith(day)]
        assert table.column("trajectory_id").to_pylist() == expected
        stats = json.loads(add["stats"])
        assert stats["numRecords"] == len(expected) == 20 and add["dataChange"] is True
        times = table.column("occurred_at").to_pylist()
        lo = dt.datetime.fromisoformat(stats["minValues"]["occurred_at"].replace("Z", "+00:00"))
        hi = dt.datetime.fromisoformat(stats["maxValues"]["occurred_at"].replace("Z", "+00:00"))
        assert lo <= min(times) and hi >= max(times) and hi - max(times) < dt.timedelta(milliseconds=1)
        assert stats["nullCount"]["group_id"] == 20 and stats["minValues"]["trajectory_id"] == min(expected)


def test_arrow_and_record_appends_store_the_same_hashes(lake):
    records = interleaved(12)
    lake.append("trajectories", records)
    payload = payload_of(records)
    occurred = pa.array([dt.datetime.fromisoformat(r["occurred_at"].replace("Z", "+00:00")) for r in records],
                        pa.timestamp("us", tz="UTC"))
    lake.default_writer.submit_arrow("trajectories", payload, occurred_at=occurred).result()
    rows = lake.snapshot().sql("SELECT trajectory_id, list(content_hash), list(day) FROM trajectories "
                               "GROUP BY 1").fetchall()
    assert len(rows) == 12
    assert all(len(hashes) == 2 and hashes[0] == hashes[1] and days[0] == days[1] for _, hashes, days in rows)


def test_delta_readers_see_the_lake_writers_files(lake):
    """delta-rs itself (file list, row count, a stats-pruned scan) reads what lake.data_files committed."""
    lake.append("trajectories", interleaved(30))
    dt_ = lake.delta_table("trajectories")
    assert len(dt_.file_uris()) == 3
    assert len(dt_.file_uris(partition_filters=[("day", "=", DAYS[1])])) == 1
    pruned = dt_.to_pyarrow_dataset().to_table(filter=pc.field("trajectory_id") == "traj-4")
    assert pruned.column("trajectory_id").to_pylist() == ["traj-4"]
