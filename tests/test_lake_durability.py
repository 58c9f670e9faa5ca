"""Durability to the OS: every file and directory entry of a commit is fsynced before the caller hears of it.

The recorder wraps ground.durable.fsync_fd, the one function through which the lake calls os.fsync: it notes
which path each descriptor names (/proc/self/fd) and then really fsyncs it.
"""
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from ground import durable
from lake import Lake, schemas
from lake.delta import commit_actions
from lake.maintenance import compact
from tests.lake_helpers import trajectory

DAYS = ("2026-11-01", "2026-11-02")


class FsyncRecorder:
    def __init__(self):
        self.paths: list[Path] = []
        self.lock = threading.Lock()  # data files are synced by the writer's threads

    def __call__(self, fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)
        with self.lock:
            self.paths.append(path)


@pytest.fixture
def synced(monkeypatch):
    recorder = FsyncRecorder()
    monkeypatch.setattr(durable, "fsync_fd", recorder)
    return recorder


def commit_files(lk, version):
    table = lk.table_path("trajectories")
    return [table / a["add"]["path"] for a in commit_actions(table, version) if "add" in a]


def assert_commit_synced(lk, version, synced):
    table = lk.table_path("trajectories")
    log = table / "_delta_log" / f"{version:020d}.json"
    files = commit_files(lk, version)
    assert files and set(files) | {log} <= set(synced.paths)
    assert {f.parent for f in files} | {table, log.parent} <= set(synced.paths)  # new entries' directories
    last_data = max(synced.paths.index(f) for f in files)
    assert last_data < synced.paths.index(log)  # data on disk before the log entry that points at it


def test_an_append_returns_after_its_files_log_entry_and_directories_are_synced(tmp_path, synced):
    lk = Lake.init(tmp_path / "lake")
    synced.paths.clear()
    res = lk.append("trajectories", [trajectory(i, occurred_at=f"{DAYS[i % 2]}T10:00:00Z") for i in range(6)])
    assert len(commit_files(lk, res.version)) == 2
    assert_commit_synced(lk, res.version, synced)


def test_the_schema_evolution_path_is_synced_too(tmp_path, synced, monkeypatch):
    lk = Lake.init(tmp_path / "lake")
    monkeypatch.setitem(schemas.PAYLOADS, "trajectories",
                        schemas.PAYLOADS["trajectories"] + [pa.field("judge", pa.string())])
    synced.paths.clear()
    res = Lake(lk.root).append("trajectories", [trajectory(1, judge="gpt")])  # write_deltalake, schema merge
    assert_commit_synced(lk, res.version, synced)


def test_compaction_syncs_the_files_it_commits(tmp_path, synced):
    lk = Lake.init(tmp_path / "lake")
    for i in range(3):
        lk.append("trajectories", [trajectory(i, occurred_at=f"{DAYS[0]}T10:00:00Z")])
    synced.paths.clear()
    res = compact(lk.table_set, "trajectories")
    assert res["files_added"] == 1
    assert_commit_synced(lk, res["version"], synced)


def test_without_fsync_nothing_is_synced(tmp_path, synced):
    lk = Lake.init(tmp_path / "lake", fsync=False)
    lk.append("trajectories", [trajectory(1)])
    compact(lk.table_set, "trajectories", fsync=False)
    assert synced.paths == []
