"""Snapshots: opened for one query, refreshed in place by long-lived processes, isolated from each other."""
import gc

import pytest

from lake import Lake, duck
from lake.schemas import TABLES
from tests.lake_helpers import trajectory


@pytest.fixture
def lake(tmp_path):
    lk = Lake.init(tmp_path / "lake")
    lk.append("trajectories", [trajectory(i) for i in range(3)])
    return lk


def count(snap, table="trajectories"):
    return snap.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def snapshot_schemas():
    return {r[0] for r in duck.database().execute(
        "SELECT schema_name FROM duckdb_schemas() WHERE schema_name LIKE 'snapshot_%'").fetchall()}


def test_refresh_reads_new_commits_of_the_tables_it_holds(lake):
    snap = lake.snapshot(for_query="SELECT * FROM trajectories")
    assert set(snap.files) == {"trajectories"} and count(snap) == 3
    lake.append("trajectories", [trajectory(i) for i in range(3, 5)])
    other = Lake(lake.root)  # another writer (a second process would look the same: it shares only the log)
    other.append("trajectories", [trajectory(9)])
    other.append("rewards", [{"trajectory_id": "traj-1", "reward": 1.0}])
    assert count(snap) == 3  # pinned until refreshed
    assert snap.refresh() == {"trajectories": 3}
    assert count(snap) == 6 and snap.versions["trajectories"] == 3
    assert snap.refresh() == {}  # nothing new: nothing re-registered
    assert snap.versions["rewards"] == 1  # an unread table is pinned when `versions` is read


def test_views_over_refreshed_tables_see_the_new_rows(tmp_path):
    views = tmp_path / "views"
    views.mkdir()
    (views / "good.sql").write_text("SELECT trajectory_id FROM trajectories WHERE reward > 0.5")
    lk = Lake.init(tmp_path / "l", views_dir=views)
    lk.append("trajectories", [trajectory(i) for i in range(5)])
    snap = lk.snapshot(for_query="SELECT * FROM good")
    assert count(snap, "good") == 0
    lk.append("trajectories", [trajectory(i) for i in range(5, 10)])
    snap.refresh()
    assert count(snap, "good") == 4


def test_for_query_reads_only_what_the_query_reads_but_versions_lists_every_table(lake):
    snap = lake.snapshot(for_query="SELECT count(*) FROM trajectories")
    assert set(snap.files) == {"trajectories"}
    assert set(snap.versions) == set(TABLES) and snap.versions["trajectories"] == 1
    with pytest.raises(Exception, match="rewards"):
        snap.sql("SELECT * FROM rewards").fetchall()


def test_snapshots_in_one_process_are_isolated(lake):
    old = lake.snapshot(as_of=0)
    new = lake.snapshot()
    assert (count(old), count(new)) == (0, 3)
    old.con.execute("SET VARIABLE sft_test_fraction = 0.5")
    assert new.sql("SELECT getvariable('sft_test_fraction')").fetchall() == [(None,)]
    old.con.execute("CREATE VIEW mine AS SELECT 1")
    with pytest.raises(Exception, match="mine"):
        new.sql("SELECT * FROM mine").fetchall()
    old.close()
    assert count(new) == 3  # closing one snapshot leaves the other working


def test_a_dropped_snapshot_takes_its_schema_with_it(lake):
    before = snapshot_schemas()
    rows = lake.snapshot().sql("SELECT count(*) FROM trajectories").fetchall()  # the relation keeps it alive
    assert rows == [(3,)]
    gc.collect()
    assert snapshot_schemas() == before
    with lake.snapshot() as snap:
        assert len(snapshot_schemas()) == len(before) + 1
    assert snapshot_schemas() == before and snap.files  # close() dropped it while `snap` is still referenced


def test_threads_sharing_a_file_handle_each_read_at_their_own_position(tmp_path, monkeypatch):
    """DuckDB shares one file handle among the threads that scan a file, and reads at an offset as a seek then a
    read. A seek slowed down here (the GIL free between the two, as a busy machine makes it at random) lets another
    thread seek in between: with one position per handle that read returned bytes of the wrong place (the Parquet
    decoder's "Out of buffer" on the skills page of a 1M-row lake); with one position per thread it cannot."""
    import time

    lk = Lake.init(tmp_path / "lake")
    for part in range(2):
        lk.append("trajectories", [trajectory(i) for i in range(part * 6000, (part + 1) * 6000)])
    query = "SELECT count(*), sum(len(sources)) FROM skill_uses"
    plain = "SELECT count(*), sum(len(messages)) FROM trajectories"
    with lk.snapshot(read_only=True) as snap:
        want = snap.sql(plain).fetchall()
    seek = duck._ReadAt.seek

    def slow_seek(self, offset, whence=0):
        out = seek(self, offset, whence)
        time.sleep(0.0005)
        return out

    monkeypatch.setattr(duck._ReadAt, "seek", slow_seek)
    for _ in range(3):
        with lk.snapshot(read_only=True) as snap:
            assert snap.sql(plain).fetchall() == want
            assert snap.sql(query).fetchall() == [(0, None)]  # no skill named anywhere: the scan itself is the test
