"""Other engines read the lake at a version: polars' Delta reader and Daft (`daft.read_deltalake`, the engine that
runs on Ray) give the same counts and the same `sft` view rows as `lake sql`, on a local root and on the S3
emulator (docs/scale-out.md). The views are SQL, so the engines' tables go through the same views/*.sql."""
import daft  # the `engines` extra; scripts/bootstrap.sh installs it
import duckdb
import polars as pl
import pytest

from lake import Lake
from lake.snapshot import read_views, register_views
from lake.store import Store
from tests.lake_helpers import trajectory

pytestmark = pytest.mark.s3
SFT_COLUMNS = "trajectory_id, task_id, split, sample_hash, reward, success, messages"


def polars_table(uri: str, version: int, store: Store):
    return pl.read_delta(uri, version=version, storage_options=store.storage_options).to_arrow()


def daft_io_config(store: Store):
    """Daft's spelling of the lake's S3 settings (its own client; delta-rs gets the storage options)."""
    if store.local:
        return None
    o = store.storage_options
    return daft.io.IOConfig(s3=daft.io.S3Config(
        endpoint_url=o.get("AWS_ENDPOINT_URL"), key_id=o.get("AWS_ACCESS_KEY_ID"),
        access_key=o.get("AWS_SECRET_ACCESS_KEY"), session_token=o.get("AWS_SESSION_TOKEN"),
        region_name=o.get("AWS_REGION"), use_ssl=not o.get("AWS_ENDPOINT_URL", "https").startswith("http://")))


def daft_table(uri: str, version: int, store: Store):
    return daft.read_deltalake(uri, version=version, io_config=daft_io_config(store)).to_arrow()


def engine_views(lk: Lake, versions: dict[str, int], read) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose tables are what `read` (an engine) returned for each table at its pinned version,
    with the lake's views/*.sql on top."""
    con = duckdb.connect()
    for table, version in versions.items():
        con.register(table, read(str(lk.table_path(table)), version, lk.table_set.store))
    created, errors = register_views(con, read_views(lk.views_dir))
    assert "sft" in created, errors
    return con


def make_lake(root) -> Lake:
    lk = Lake.init(root)
    good = [trajectory(i) for i in range(9, 60, 10)]  # success (i % 10 == 9): sft rows
    lk.append("trajectories", good[:3] + [trajectory(i) for i in range(3)])
    lk.append("trajectories", good[3:] + [trajectory(i) for i in range(3, 6)])
    lk.append("rewards", [{"trajectory_id": "traj-1", "reward": 1.0, "success": True}])
    lk.append("trajectories", [trajectory(i) for i in range(69, 100, 10)])  # after the pinned version
    return lk


def test_polars_and_daft_read_the_same_rows_as_lake_sql_at_a_version(any_lake_root):
    lk = make_lake(any_lake_root)
    snap = lk.snapshot({"trajectories": 2})
    versions = snap.versions
    assert versions["trajectories"] == 2 and lk.version("trajectories") == 3
    counts = {t: snap.sql(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in versions}
    sft = snap.sql(f"SELECT {SFT_COLUMNS} FROM sft ORDER BY trajectory_id").fetchall()
    assert counts["trajectories"] == 12 and counts["rewards"] == 1
    assert len(sft) == 8  # 6 successes, traj-5 (reward 0.5) and traj-1 (made good by its reward event)
    for name, read in (("polars", polars_table), ("daft", daft_table)):
        con = engine_views(lk, versions, read)
        got = {t: con.sql(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in versions}
        assert got == counts, name
        assert con.sql(f"SELECT {SFT_COLUMNS} FROM sft ORDER BY trajectory_id").fetchall() == sft, name
    snap.close()
