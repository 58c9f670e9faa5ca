"""The streaming trainer on a lake in object storage (an s3:// root of the S3 emulator): it polls (there is no log
folder to watch), keeps its own files in its local folder, and `lake train watch --once` after each of two appended
batches trains two increments that consume exactly the appended rows."""
from __future__ import annotations

import json

import pytest

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)
from test_train_watch import good_batch, runs_of

from lachesis.cli import app
from lachesis.console import run
from lake import Lake
from trainers.runtime import checkpoint
from trainers.watch.config import HEARTBEAT_FILE, WATCH_FILE
from trainers.watch.feed import events_digest
from trainers.watch.status import watcher_status

pytestmark = pytest.mark.s3


def watch_once(root: str, folder, capsys) -> list[dict]:
    """`lake train watch --once --json` in this process (its own parsing and loop); its JSON events."""
    argv = ["train", "watch", "--lake", root, "--output", str(folder), "--once", "--json", "--split", "all",
            "--batch-size", "8", "--max-steps", "2", "--threads", "1", "--replay", "0"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        run(app, argv, prog_name="lake")
    out = capsys.readouterr()
    assert done.value.code == 0, out.err
    return [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]


def test_watch_once_on_an_s3_lake_trains_each_appended_batch_once(s3_emulator, tmp_path, monkeypatch, capsys,
                                                                  tiny_dir):
    for key, value in s3_emulator.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LACHESIS_LOCK_DIR", str(tmp_path / "locks"))
    root = f"s3://{s3_emulator.new_bucket()}/lake"
    lake = Lake.init(root)
    folder = tmp_path / "watch"
    sizes, events = [6, 4], []
    for i, n in enumerate(sizes):
        lake.append("trajectories", good_batch(n, 500 * (i + 1)))
        got = [e for e in watch_once(root, folder, capsys) if e["event"] == "increment"]
        assert len(got) == 1 and got[0]["rows_consumed"] == n
        events.append(got[0])
    assert [e["increment"] for e in events] == [1, 2]
    assert [e["event"] for e in watch_once(root, folder, capsys)] == ["ready", "nothing_new"]  # no increment

    meta = json.loads((folder / WATCH_FILE).read_text())
    assert meta["lake_root"] == root  # the URL, as status reopens it
    assert (folder / HEARTBEAT_FILE).is_file() and len(checkpoint.complete(folder)) == 2  # local files
    recorded = runs_of(lake, meta["serial"])
    assert [r["metrics"]["rows_consumed"] for r in recorded] == sizes
    for r in recorded:  # each increment's versions hold exactly the rows it consumed
        m = r["manifest"]
        ids = lake.changes("trajectories", m["after"]["trajectories"], m["upto"]["trajectories"]).column("event_id")
        assert m["events_sha256"] == events_digest(ids.to_pylist()) and len(ids) == r["metrics"]["rows_consumed"]
    assert recorded[-1]["manifest"]["upto"]["trajectories"] == lake.version("trajectories")
    assert lake.consumers()["watch-sft"] == recorded[-1]["manifest"]["upto"]
    status = watcher_status(folder)
    assert status["increments"] == 2 and status["lag_rows"] == {"trajectories": 0, "rewards": 0}
