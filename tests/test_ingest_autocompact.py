"""`lake serve` and `lake watch` compact the small files they write, with no `lake compact`, and stop cleanly."""
import json
import signal
import threading
import time

import httpx
from fastapi.testclient import TestClient

from ingest.app import create_app
from ingest.config import ServeConfig

from lake import Lake
from tests.ingest_helpers import ServerProcess, WatchProcess

COMMITS = 10  # one small file each; the newest day is due from 8 (lake.autocompact.CompactThresholds)


def record(i):
    return {"messages": [{"role": "user", "content": f"task {i}"}, {"role": "assistant", "content": f"answer {i}"}],
            "occurred_at": "2026-11-05T10:00:00Z"}


def day_files(root):
    return Lake(root).table_set.partition_files("trajectories")


def wait_compacted(root, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = day_files(root)
        if sum(map(len, files.values())) < COMMITS and len(rows(root)) == COMMITS:  # all in, fewer files
            return files
        time.sleep(0.2)
    raise AssertionError(f"not compacted within {timeout}s: {day_files(root)}")


def operations(root):
    return [h["operation"] for h in Lake(root).delta_table("trajectories").history()]


def rows(root):
    with Lake(root).snapshot() as snap:
        return sorted(snap.sql("SELECT trajectory_id, content_hash FROM trajectories").fetchall())


def stop_cleanly(proc, log_path):
    proc.proc.send_signal(signal.SIGTERM)
    # uvicorn re-raises the SIGTERM it handled once its shutdown (the lifespan's end) is complete
    assert proc.proc.wait(timeout=30) in (0, -signal.SIGTERM), log_path.read_text()
    assert "Traceback" not in log_path.read_text() and "automatic compaction stopped" not in log_path.read_text()


def test_served_lake_is_compacted_without_lake_compact(tmp_path):
    root, log = tmp_path / "lake", tmp_path / "serve.log"
    Lake.init(root)
    srv = ServerProcess(root, log_path=log, extra=["--compact-interval", "0.2"]).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for i in range(COMMITS):  # one request at a time: one Delta version, one small file each
                assert c.post("/v1/trajectories", json=record(i)).json()["accepted"] == 1
        files = wait_compacted(root)
        stop_cleanly(srv, log)
    finally:
        srv.kill()
    assert list(files) == ["2026-11-05"] and "OPTIMIZE" in operations(root)
    assert len(rows(root)) == COMMITS


def test_server_lifespan_starts_and_stops_the_compactor(tmp_path):
    """The compactor thread runs while the app does and is gone once its lifespan ends (in-process)."""
    def compactors():
        return [t for t in threading.enumerate() if t.name == "lake-autocompact"]

    app = create_app(tmp_path / "lake", ServeConfig(compact_interval=0.1, allowed_hosts="*"))
    assert compactors() == []
    with TestClient(app) as c:
        assert c.get("/v1/health").status_code == 200 and len(compactors()) == 1
    assert compactors() == []


def test_watched_inbox_is_compacted_and_the_watcher_stops_cleanly(tmp_path):
    root, inbox, log = tmp_path / "lake", tmp_path / "inbox", tmp_path / "watch.log"
    inbox.mkdir()
    Lake.init(root)
    for i in range(COMMITS):  # a file is ingested whole, as one commit
        (inbox / f"t{i}.jsonl").write_text(json.dumps(record(i)) + "\n")
    wp = WatchProcess(root, inbox=inbox, settle=0.0, interval=0.2, extra=["--compact-interval", "0.2"],
                      log_path=log).start()
    try:
        files = wait_compacted(root)
        assert len(list((inbox / ".done").glob("*.jsonl"))) == COMMITS
        stop_cleanly(wp, log)
    finally:
        wp.kill()
    assert list(files) == ["2026-11-05"] and "OPTIMIZE" in operations(root)
    assert len(rows(root)) == COMMITS


def test_compaction_can_be_turned_off(tmp_path):
    root, log = tmp_path / "lake", tmp_path / "serve.log"
    Lake.init(root)
    with ServerProcess(root, log_path=log, extra=["--compact-interval", "0"]) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for i in range(COMMITS):
                c.post("/v1/trajectories", json=record(i))
        time.sleep(1.0)
    assert [len(s) for s in day_files(root).values()] == [COMMITS] and "OPTIMIZE" not in operations(root)
