"""The lake on object storage: every operation on a local root and on an s3:// root of the S3 emulator
(moto's server, started by tests/s3_emulator.py), and no lake module opening a path under the root."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lake import Lake, LakeError
from lake.consumer import Consumer
from lake.maintenance import compact, history, vacuum
from lake.schemas import TABLES
from lake.store import Store, s3_options
from tests.lake_helpers import trajectory
from views.export import export_view

pytestmark = pytest.mark.s3
LAKE_CLI = str(Path(sys.executable).with_name("lake"))  # the console script of this venv


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


# -- no lake module opens a path under the root: a real audit hook on every open() of this process -------------
_opens: list[tuple[str, str]] | None = None  # (path, the lake function that opened it) while a workload runs


def _lake_caller() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(("lake.", "ground.")):  # the ground: the fsync and atomic writes the lake calls
            return f"{module}.{frame.f_code.co_qualname}"
        frame = frame.f_back
    return "outside the lake"


def _audit(event, args):
    if event == "open" and _opens is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _opens.append((os.fsdecode(args[0]), _lake_caller()))


sys.addaudithook(_audit)  # hooks cannot be removed: it records only while `_opens` is a list

# A local disk's durability and locking need file descriptors: fsync of written files and directories, the
# temp file of an atomic replace, the flock files. None of them reads the log or data.
LOCAL_ONLY = ("ground.durable.fsync_path", "ground.atomic.write_bytes_atomic", "lake.locks.TableLocks._fd",
              "lake.maintenance.compaction_lock")


def check_opens(any_lake_root, opened):
    """No lake module opened a path under the root, except a local disk's fsync, atomic-replace and lock files,
    and none of those read the Delta log or a data file."""
    assert opened, "the audit hook saw no open() at all"  # the checkpoint and the export open files
    if any_lake_root.startswith("s3://"):
        where = any_lake_root.split("://", 1)[1]
        assert [o for o in opened if where in o[0]] == []  # nothing names the bucket: everything went to S3
        return
    root = os.path.abspath(any_lake_root)
    under = [(p, who) for p, who in opened if os.path.abspath(p).startswith(root + os.sep)]
    assert under, "a local lake fsyncs its commits: the hook must see those opens"
    assert {who for _, who in under} <= set(LOCAL_ONLY), under
    reads = [(p, who) for p, who in under if ("_delta_log" in p or p.endswith(".parquet"))
             and who != "ground.durable.fsync_path"]
    assert reads == []


def test_every_lake_operation_on_a_local_and_an_s3_root_without_open(any_lake_root, tmp_path):
    global _opens
    _opens = []
    try:
        seen = run_workload(any_lake_root, tmp_path)
    finally:
        opened, _opens = _opens, None
    check_opens(any_lake_root, opened)
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


def test_the_lake_cli_takes_an_s3_root(s3_emulator, tmp_path):
    """`--lake s3://...` survives the CLI's Path-typed option (which drops a slash) and every command reaches S3."""
    root = f"s3://{s3_emulator.new_bucket()}/lake"
    env = {**os.environ, **s3_emulator.env(), "LACHESIS_LOCK_DIR": str(tmp_path / "locks")}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(trajectory(i)) for i in range(3)) + "\n")

    def lake(*args):
        out = subprocess.run([LAKE_CLI, *args, "--lake", root], env=env,
                             capture_output=True, text=True, timeout=120)
        return out.returncode, out.stdout + out.stderr

    assert lake("init")[0] == 0
    assert lake("append", "trajectories", str(rows))[0] == 0
    code, out = lake("sql", "SELECT count(*) AS n FROM trajectories", "--json")
    assert code == 0 and json.loads(out)[0]["n"] == 3, out
    assert Lake.open(root, storage_options=s3_emulator.env()).version("trajectories") == 1


def test_object_store_errors_are_one_line_lake_errors_without_credentials(s3_emulator, monkeypatch, tmp_path):
    secret = "sekrit-" + "x" * 8
    for key, value in {**s3_emulator.env(), "AWS_SECRET_ACCESS_KEY": secret}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LACHESIS_LOCK_DIR", str(tmp_path / "locks"))
    with pytest.raises(LakeError, match="NoSuchBucket") as missing:
        Lake.init("s3://no-such-bucket/lake")
    with pytest.raises(LakeError, match="only local paths and s3:// URLs") as scheme:
        Lake.open("gs://bucket/lake")
    store = Store(f"s3://{s3_emulator.new_bucket()}/lake")
    assert secret not in repr(store) and secret not in str(missing.value) + str(scheme.value)
    assert store.storage_options["AWS_SECRET_ACCESS_KEY"] == secret  # taken from the environment
    assert s3_options({"aws_region": "eu-west-1"})["AWS_REGION"] == "eu-west-1"  # options win, any case
    # a URL that went through pathlib (a CLI option typed Path) keeps working
    lk = Lake.init(Path(f"{store.root}"))
    assert lk.root == store.root and Lake.open(Path(str(store.root))).tables() == TABLES


def test_two_lakes_on_one_s3_root_store_a_trajectory_id_once(any_lake_root):
    """Ingest's dedupe guard (ingest/dedupe.py) catches up on the other writer's commits by reading their key
    column from the object store, under the commit lock."""
    from ingest.dedupe import KeyGuard, trajectory_keys

    first, second = Lake.init(any_lake_root), Lake.open(any_lake_root)
    for lk in (first, second):
        lk.guards["trajectories"] = KeyGuard(lk, "trajectories", trajectory_keys, "trajectory_id", set(), 0)
    assert first.append("trajectories", [trajectory(1)]).rows == 1
    res = second.append("trajectories", [trajectory(1), trajectory(2)])
    assert (res.rows, res.skipped) == (1, 1)
    assert sorted(r[0] for r in second.snapshot().sql("SELECT trajectory_id FROM trajectories").fetchall()) == [
        "traj-1", "traj-2"]
