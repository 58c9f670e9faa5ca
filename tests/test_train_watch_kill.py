"""kill -9 of the streaming trainer at seeded random points while it trains, five times, then `lake train watch --once`
to the end:
every appended row is in exactly one increment (from the runs events), no increment folder is half-written,
and the final weights load."""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)
from test_train_watch import good_batch

from lake import Lake
from trainers.runtime import checkpoint
from trainers.modeling.models import load_model
from trainers.watch.loop import StreamTrainer
from trainers.watch.config import WatchConfig
from trainers.watch.feed import events_digest
from tests.fault_figures import record

BATCHES, KILLS = 8, 5


def config(lake: Lake, folder) -> WatchConfig:
    return WatchConfig(lake_root=str(lake.root), output=str(folder), once=True, max_versions=1, split="all",
                       batch_size=4, max_steps=6, threads=1, replay=0.5, progress=False)


def _watch(cfg: WatchConfig, conn) -> None:
    trainer = StreamTrainer(cfg, emit=lambda rec: conn.send(rec["event"]))
    trainer.run()
    trainer.close()


def kill_while_training(cfg: WatchConfig, delay: float) -> bool:
    """A watcher process killed with SIGKILL `delay` s after it announces an increment; False when it finished
    first. Forked from a fork server that has imported the trainer once (a plain fork of this process would inherit
    deltalake's tokio runtime, which refuses to run in a forked child)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["trainers.watch.loop", "lachesis.cli"])
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_watch, args=(cfg, theirs))
    proc.start()
    while ours.poll(60):
        if ours.recv() == "training":
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.join(60)
    return proc.exitcode == -signal.SIGKILL


def _lake_command(argv: list[str]) -> None:
    from lachesis.cli import app
    from lachesis.console import run

    run(app, argv)


def restart_with_the_cli(lake: Lake, folder) -> int:
    """The same watcher as a user starts it, `lake train watch --once ...` (the command's own parsing and loop), in a
    process of the same fork server (a fresh interpreter would pay the imports again). Returns its exit code."""
    argv = ["train", "watch", "--lake", str(lake.root), "--output", str(folder), "--once", "--json", "--max-versions",
            "1", "--split", "all", "--batch-size", "4", "--max-steps", "6", "--threads", "1", "--replay", "0.5"]
    proc = multiprocessing.get_context("forkserver").Process(target=_lake_command, args=(argv,))
    proc.start()
    proc.join(120)
    return proc.exitcode


def test_kill_9_during_training_then_restart_trains_every_row_exactly_once(tmp_path, tiny_dir):
    rng = random.Random(16)
    lake = Lake.init(tmp_path / "lake")
    folder = tmp_path / "watch"
    sizes = [rng.randint(3, 9) for _ in range(BATCHES)]
    for i, n in enumerate(sizes):
        lake.append("trajectories", good_batch(n, 100 * (i + 1)))
    killed = 0
    for _ in range(KILLS):
        killed += kill_while_training(config(lake, folder), rng.uniform(0.0, 1.0))
    assert killed >= 3, "the watcher finished before most kills: the kill points missed the training"
    assert restart_with_the_cli(lake, folder) == 0

    with lake.snapshot() as snap:
        rows = snap.arrow("SELECT run_id, metrics, manifest FROM runs WHERE kind = 'train'").to_pylist()
    events = sorted(({"run_id": r["run_id"], **json.loads(r["metrics"]), **json.loads(r["manifest"])} for r in rows),
                    key=lambda e: e["increment"])
    cover = [sum(e["after"]["trajectories"] < v <= e["upto"]["trajectories"] for e in events)  # increments per version
             for v in range(1, BATCHES + 1)]
    record(f"lake train watch kill -9 ({killed} kills), then a restart", tried=sum(sizes), unit="rows appended",
           trained_twice=sum(n * (c - 1) for n, c in zip(sizes, cover) if c > 1),
           skipped=sum(n for n, c in zip(sizes, cover) if c == 0))
    assert len({e["run_id"] for e in events}) == len(events)  # no increment recorded twice
    assert [e["increment"] for e in events] == list(range(1, len(events) + 1))
    # the increments' version ranges tile (0, latest] with no gap and no overlap, each row in exactly one
    assert events[0]["after"]["trajectories"] == 0
    for a, b in zip(events, events[1:]):
        assert b["after"] == a["upto"]
    assert events[-1]["upto"]["trajectories"] == lake.version("trajectories") == BATCHES
    for e in events:
        ids = lake.changes("trajectories", e["after"]["trajectories"], e["upto"]["trajectories"]).column("event_id")
        assert e["events_sha256"] == events_digest(ids.to_pylist()) and e["rows_consumed"] == len(ids)
    assert sum(e["rows_consumed"] for e in events) == sum(sizes)

    done = checkpoint.complete(folder)
    assert len(done) == len(events)
    for ckpt in done:  # every increment folder is whole: weights, optimizer state, offsets
        assert (ckpt / "state.pt").is_file() and (checkpoint.weights(ckpt) / "model.safetensors").is_file()
        assert checkpoint.read_state(ckpt)["offsets"]["trajectories"] == int(ckpt.name.split("-")[1])
    assert load_model(str(checkpoint.weights(done[-1]))) is not None
