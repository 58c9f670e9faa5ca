"""The streaming trainer in one process (trainers/watch/loop.py): increments consume exactly the appended rows, a
compaction is no increment, vacuum spares what the watcher has not consumed, a commit wakes a resident watcher,
status reports lag, --eval-every records an evaluation of the increment's weights."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)
from views_helpers import seeded_trajectories

from lake import Lake
from lake.delta import added_files
from lake.maintenance import compact, vacuum
from trainers.runtime import checkpoint
from trainers.modeling.models import load_model
from trainers.watch.loop import StreamTrainer
from trainers.watch.config import WatchConfig
from trainers.watch.feed import events_digest
from trainers.watch.status import watcher_status

FAST = dict(split="all", batch_size=8, max_steps=2, progress=False, threads=1)


def good_batch(n: int, start: int) -> list[dict]:
    """n trajectories the sft view keeps (successful, distinct chats)."""
    rows = seeded_trajectories(n, seed=start, start=start)
    for r in rows:
        r["success"], r["reward"] = True, 1.0
    return rows


def runs_of(lake: Lake, serial: str) -> list[dict]:
    """The watcher's runs events, metrics and manifest parsed (JSON text in the lake)."""
    with lake.snapshot() as snap:
        rows = snap.arrow(f"SELECT run_id, kind, adapter_path, metrics, manifest FROM runs "
                          f"WHERE starts_with(run_id, '{serial}') ORDER BY run_id").to_pylist()
    return [{**r, "metrics": json.loads(r["metrics"]), "manifest": json.loads(r["manifest"])} for r in rows]


@pytest.fixture()
def lake(tmp_path) -> Lake:
    return Lake.init(tmp_path / "lake")


def trainer(lake: Lake, tmp_path: Path, **kw) -> StreamTrainer:
    return StreamTrainer(WatchConfig(lake_root=str(lake.root), output=str(tmp_path / "watch"), **{**FAST, **kw}))


def test_three_batches_three_increments_and_a_compaction_is_none(lake, tmp_path, tiny_dir):
    st = trainer(lake, tmp_path, replay=0.5)
    sizes, events = [7, 5, 9], []
    try:
        for i, n in enumerate(sizes):
            if i == 2:  # the first two batches' files merged: a new version without new data
                assert compact(lake.table_set, "trajectories")["files_added"] == 1
                assert st.step() is None
            res = lake.append("trajectories", good_batch(n, 1000 * (i + 1)))
            ev = st.step()
            assert ev is not None and st.step() is None
            got = lake.changes("trajectories", ev["manifest"]["after"]["trajectories"],
                               ev["manifest"]["upto"]["trajectories"]).column("event_id").to_pylist()
            assert ev["metrics"]["rows_consumed"] == n == len(got)
            assert ev["manifest"]["events_sha256"] == events_digest(got)
            assert ev["manifest"]["upto"]["trajectories"] >= res.version
            events.append(ev)
        assert compact(lake.table_set, "trajectories")["files_added"] == 1  # after the last increment: nothing new
        assert st.step() is None
    finally:
        st.close()
    recorded = runs_of(lake, st.meta["serial"])
    assert [r["run_id"] for r in recorded] == [e["run_id"] for e in events]
    assert sum(e["metrics"]["rows_consumed"] for e in events) == sum(sizes)
    assert events[1]["metrics"]["replayed_examples"] > 0  # older rows replayed from the second increment on
    assert len(checkpoint.complete(tmp_path / "watch")) == 3
    assert lake.consumers()["watch-sft"] == events[-1]["manifest"]["upto"]


def test_vacuum_keeps_what_the_watcher_has_not_consumed(lake, tmp_path, tiny_dir):
    st = trainer(lake, tmp_path)
    try:
        lake.append("trajectories", good_batch(6, 1))
        assert st.step()["metrics"]["rows_consumed"] == 6
        v2 = lake.append("trajectories", good_batch(4, 2)).version
        path = lake.table_path("trajectories")
        unconsumed = [f for f, _ in added_files(path, v2)]
        consumed = [f for f, _ in added_files(path, 1)]
        compact(lake.table_set, "trajectories")
        out = vacuum(lake.table_set, "trajectories", retention_hours=0)
        assert out["kept_for_consumers"] == 1 and out["deleted"] == 1
        assert all(Path(f).exists() for f in unconsumed)
        assert not any(Path(f).exists() for f in consumed)
        ev = st.step()  # reads the spared file through the change feed
        assert ev["metrics"]["rows_consumed"] == 4
    finally:
        st.close()
    assert vacuum(lake.table_set, "trajectories", retention_hours=0)["deleted"] == 1  # consumed now: it may go


def test_a_commit_wakes_the_resident_watcher_and_status_reports_lag(lake, tmp_path, tiny_dir):
    st = trainer(lake, tmp_path, max_increments=1, poll_interval=60.0, debounce=0.05)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (st.run(), done.set()), daemon=True)
    try:
        thread.start()
        time.sleep(0.5)  # waiting on the log folder now (the poll is a minute away)
        committed = time.time()
        lake.append("trajectories", good_batch(5, 3))
        assert done.wait(60), "the commit did not wake the watcher"
        metrics = runs_of(lake, st.meta["serial"])[0]["metrics"]
        assert metrics["rows_consumed"] == 5
        assert metrics["first_step_at"] - committed < 30  # woken by the file event, not by the minute's poll
        status = watcher_status(tmp_path / "watch")
        assert status["alive"] and status["increments"] == 1
        assert status["lag_versions"] == {"trajectories": 0, "rewards": 0}
        lake.append("trajectories", good_batch(3, 4))
        status = watcher_status(tmp_path / "watch")
        assert status["lag_versions"]["trajectories"] == 1 and status["lag_rows"]["trajectories"] == 3
    finally:
        st.close()
    assert not watcher_status(tmp_path / "watch")["alive"]


def test_lake_train_status_json(lake, tmp_path, tiny_dir, capsys):
    from lachesis.cli import app
    from lachesis.console import run

    lake.append("trajectories", good_batch(3, 9))
    st = trainer(lake, tmp_path)
    try:
        st.step()
    finally:
        st.close()
    lake.append("trajectories", good_batch(2, 10))
    with pytest.raises(SystemExit) as exit_:
        run(app, ["train", "status", "--runs", str(tmp_path), "--json"])
    assert exit_.value.code == 0
    [status] = json.loads(capsys.readouterr().out)
    assert status["name"] == "watch-sft" and status["increments"] == 1 and status["alive"] is False
    assert status["lag_rows"] == {"trajectories": 2, "rewards": 0}
    assert status["registered_offsets"] == status["offsets"] == {"trajectories": 1, "rewards": 0}


def test_restart_continues_from_the_last_increment_and_eval_every_records_it(lake, tmp_path, tiny_dir):
    lake.append("trajectories", good_batch(5, 5))
    st = trainer(lake, tmp_path, eval_every=1, eval_limit=1)
    try:
        ev = st.step()
    finally:
        st.close()
    weights = ev["adapter_path"]
    evals = [r for r in _all_runs(lake) if r["kind"] == "eval"]
    assert len(evals) == 1 and evals[0]["adapter_path"] == weights
    again = trainer(lake, tmp_path)
    try:
        assert again.counter.n == 1 and again.offsets == ev["manifest"]["upto"]
        assert again.step() is None
        lake.append("trajectories", good_batch(2, 6))
        assert again.step()["metrics"]["increment"] == 2
    finally:
        again.close()
    assert load_model(weights) is not None


def _all_runs(lake: Lake) -> list[dict]:
    with lake.snapshot() as snap:
        return snap.arrow("SELECT run_id, kind, adapter_path FROM runs").to_pylist()


def test_a_second_watcher_on_the_same_folder_is_refused(lake, tmp_path, tiny_dir):
    from trainers.runtime.errors import TrainerInputError

    st = trainer(lake, tmp_path)
    try:
        with pytest.raises(TrainerInputError, match="already runs"):
            trainer(lake, tmp_path)
    finally:
        st.close()


def test_the_instruction_recipe_follows_skills_and_their_usage(lake, tmp_path, tiny_dir):
    from views_helpers import build_hermes_home, ingest_skills_folder

    build_hermes_home(tmp_path / "home")
    ingest_skills_folder(lake, tmp_path / "home")
    st = trainer(lake, tmp_path, recipe="instruction", max_length=512)  # what is fed is the test, not long steps
    try:
        ev = st.step()
        assert st.step() is None
    finally:
        st.close()
    fed = {t: lake.changes(t, 0).num_rows for t in ("skills", "skill_usage")}
    assert ev["metrics"]["rows"] == fed and ev["metrics"]["rows_consumed"] == sum(fed.values())
    with lake.snapshot() as snap:
        pairs = snap.arrow("SELECT count(*) AS n FROM instruction").column("n")[0].as_py()
    assert ev["metrics"]["view_rows"] == pairs > 0  # every pair of the view is new in the first increment


def test_a_restarted_lora_watcher_trains_its_adapter_on(lake, tmp_path, tiny_dir):
    """docs/training-notes.md pitfall 11: an adapter loaded back is frozen unless loaded trainable."""
    import torch

    lake.append("trajectories", good_batch(4, 7))
    st = trainer(lake, tmp_path, full=False)
    try:
        first = st.step()
        trainable = st.trainable
    finally:
        st.close()
    assert (Path(first["adapter_path"]) / "adapter_config.json").is_file()
    again = trainer(lake, tmp_path, full=False)
    try:
        assert again.trainable == trainable > 0
        before = {k: v.clone() for k, v in again.model.named_parameters() if v.requires_grad}
        lake.append("trajectories", good_batch(4, 8))
        ev = again.step()
        assert ev["metrics"]["steps"] == 2
        after = dict(again.model.named_parameters())
        assert any(not torch.equal(before[k], after[k]) for k in before)
    finally:
        again.close()


def test_a_folder_keeps_its_view_and_model(lake, tmp_path, tiny_dir):
    from trainers.runtime.errors import TrainerInputError

    trainer(lake, tmp_path).close()
    with pytest.raises(TrainerInputError, match="folder of a watcher of view 'sft'"):
        trainer(lake, tmp_path, recipe="instruction")
    assert not watcher_status(tmp_path / "watch")["alive"]  # the failed start left no lock and no live heartbeat
    trainer(lake, tmp_path).close()


def test_an_increment_without_a_new_example_publishes_nothing_and_says_why(lake, tmp_path, tiny_dir, capsys):
    """Issue 37, item 1: rows left out are counted by reason (the increment's event and log line, `lake train
    status`), and an increment that trains 0 steps is no new version: no checkpoint, no runs event; its rows are
    consumed all the same, also across a restart."""
    from lachesis.train_watch_cli import _emitter

    lines: list[dict] = []
    def watcher(**kw) -> StreamTrainer:
        return StreamTrainer(WatchConfig(lake_root=str(lake.root), output=str(tmp_path / "watch"), **{**FAST, **kw}),
                             emit=lines.append)

    st = watcher(max_length=8)  # no row's system prompt and task fit in 8 tokens
    try:
        lake.append("trajectories", good_batch(3, 300))
        rec = st.step()
        assert rec["event"] == "skipped" and rec["left_out"] == {"over_max_length": 3} and rec["rows_consumed"] == 3
        assert st.step() is None  # consumed
        serial = st.meta["serial"]
    finally:
        st.close()
    assert checkpoint.complete(tmp_path / "watch") == [] and runs_of(lake, serial) == []
    assert lake.consumers()["watch-sft"] == rec["upto"]
    status = watcher_status(tmp_path / "watch", lake)
    assert status["skipped"]["left_out"] == {"over_max_length": 3} and status["lag_rows"]["trajectories"] == 0
    _emitter(False, False)(rec)
    assert "no increment: 3 rows consumed, no new example, left out: over_max_length 3; nothing published" in \
        capsys.readouterr().err

    st = watcher(split="train")  # restarted: the skipped rows stay consumed
    try:
        assert st.offsets == rec["upto"] and not st.recovery
        rows = good_batch(4, 400)
        for r, split in zip(rows, ("test", "train", "train", "train")):
            r["split"] = split
        rows[1]["messages"][0]["content"] = "x " * 40_000  # a system prompt over 16 x --max-length characters
        lake.append("trajectories", rows)
        ev = st.step()
    finally:
        st.close()
    assert ev["metrics"]["left_out"] == {"other_split": 1, "over_max_length": 1}
    assert ev["metrics"]["new_examples"] == 2 and ev["metrics"]["steps"] == 2 and ev["metrics"]["increment"] == 1
    assert lines[-1]["event"] == "increment" and lines[-1]["left_out"] == ev["metrics"]["left_out"]
    status = watcher_status(tmp_path / "watch", lake)
    assert status["skipped"] is None and status["last_increment"]["left_out"] == ev["metrics"]["left_out"]
    assert status["increments"] == 1 and [r["run_id"] for r in runs_of(lake, serial)] == [ev["run_id"]]


def test_each_increment_names_its_weights_by_their_sha256sum(lake, tmp_path, tiny_dir):
    """Issue 37, item 7: adapter_sha256 is what `sha256sum` prints for the weights file, in the increment's runs
    event (and so what the model server records for each call of that version: the same function)."""
    import shutil
    import subprocess

    from trainers.runtime.model_folder import weights_sha256

    lake.append("trajectories", good_batch(3, 500))
    st = trainer(lake, tmp_path)
    try:
        ev = st.step()
    finally:
        st.close()
    weights = Path(ev["adapter_path"])
    (name,) = [p.name for p in weights.iterdir() if p.suffix == ".safetensors"]  # the tiny model: full fine-tuning
    out = subprocess.run(["sha256sum", name], cwd=weights, capture_output=True, text=True, check=True).stdout
    assert ev["metadata"]["adapter_sha256"] == out.split()[0]
    (recorded,) = runs_of(lake, st.meta["serial"])
    with lake.snapshot() as snap:
        (meta,) = snap.arrow(f"SELECT metadata FROM runs WHERE run_id = '{recorded['run_id']}'").to_pylist()
    assert json.loads(meta["metadata"])["adapter_sha256"] == out.split()[0]
    # a model in several files: the sha256 of their sha256sum lines, in name order
    two = tmp_path / "two"
    two.mkdir()
    for i in (1, 2):
        shutil.copy(weights / name, two / f"model-0000{i}-of-00002.safetensors")
    lines = subprocess.run("sha256sum *.safetensors | sha256sum", shell=True, cwd=two, capture_output=True,
                           text=True, check=True).stdout
    assert weights_sha256(two) == lines.split()[0]


# -- Hardening IV, item 9: an idle watcher sleeps; served conversations train under the defaults -----------------
SERVED = "lake serve-model"  # serving/record.py SOURCE: what marks a row as a served conversation


def served_rows(n: int, start: int = 0) -> list[dict]:
    """n conversations as `lake serve-model` records them: no task, no split, no reward (it comes later, if ever)."""
    return [{"trajectory_id": f"served-{i:04d}", "model": "tiny", "metadata": json.dumps({"source": SERVED}),
             "messages": [{"role": "user", "content": f"question {i}"},
                          {"role": "assistant", "content": f"answer {i}"}]} for i in range(start, start + n)]


def test_the_served_source_is_the_recorders():
    from serving.record import SOURCE

    assert SOURCE == SERVED


def test_reading_the_log_does_not_wake_the_watcher(lake):
    """The watcher reads the log files it watches (lake.version, the change feed): those reads are no commit. Before,
    they woke it again after each look, so an idle watcher spun at 0.2 of a core."""
    from trainers.watch.wake import Waker

    lake.append("trajectories", served_rows(2))
    waker = Waker([Path(lake.table_path("trajectories")) / "_delta_log"], interval=0.5)
    try:
        time.sleep(0.2)
        waker.event.clear()
        for _ in range(3):
            lake.version("trajectories"), lake.changes("trajectories", 0)
        assert not waker.wait(), "a read of the log woke the watcher"
        lake.append("trajectories", served_rows(1, 2))
        assert waker.wait(30), "a commit did not wake it"
    finally:
        waker.stop()


def test_an_idle_watcher_sleeps_while_unrewarded_rows_wait(lake, tmp_path, tiny_dir, monkeypatch):
    """Unrewarded served conversations give no view row: they wait. The idle watcher re-ran the change feed and the
    view on every wake (its own reads of the log woke it: about 0.2 of a core measured here); now a poll that finds
    the followed tables' versions unchanged does not look again: under 0.05 of a core, no view query."""
    import trainers.watch.loop as loop

    lake.append("trajectories", served_rows(40))
    looks: list[float] = []
    real = loop.read_increment
    monkeypatch.setattr(loop, "read_increment", lambda *a: (looks.append(time.monotonic()), real(*a))[1])
    st = trainer(lake, tmp_path, poll_interval=0.5)
    stop = threading.Event()
    thread = threading.Thread(target=st.run, args=(stop,), daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 60
        while not looks and time.monotonic() < deadline:  # its first look: the rows are there, nothing trainable
            time.sleep(0.05)
        time.sleep(1.0)
        n, cpu, wall = len(looks), time.process_time(), time.monotonic()
        time.sleep(4.0)  # 8 polls
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        assert len(looks) == n == 1, f"{len(looks)} looks at the view while idle"
        assert cpu / wall < 0.05, f"idle watcher used {cpu / wall:.3f} of a core"
        lake.append("rewards", [{"trajectory_id": "served-0003", "reward": 1.0, "success": True}])
        deadline = time.monotonic() + 60
        while st.counter.n < 1 and time.monotonic() < deadline:  # a commit still wakes it
            time.sleep(0.05)
        assert st.counter.n == 1 and len(looks) >= 2
    finally:
        stop.set()
        thread.join(60)
        st.close()


def test_a_served_conversation_trains_under_the_defaults_whatever_its_hash(lake, tmp_path, tiny_dir, capsys):
    """A served conversation has no task: its split was md5(trajectory id), so one in ten never trained under the
    defaults (--split train) and stayed lag forever. Now it trains when its reward lands, the trainer names it, and
    the lag clears; a held-out share is opt-in (--served-test-fraction, the view's sft_served_test_fraction)."""
    import duckdb

    from lachesis.train_watch_cli import _emitter

    rows = served_rows(40)
    con = duckdb.connect()
    # the first one the old rule put in the test split (sft_test_fraction 0.1 of md5_number(task key))
    held = next(r["trajectory_id"] for r in rows
                if con.execute("SELECT md5_number(?) % 1000000", [r["trajectory_id"]]).fetchall()[0][0] < 100_000)
    lake.append("trajectories", rows)
    lines: list[dict] = []
    st = StreamTrainer(WatchConfig(lake_root=str(lake.root), output=str(tmp_path / "watch"),
                                   **{**FAST, "split": "train"}), emit=lines.append)
    try:
        assert st.step() is None  # no reward yet: nothing to train, the rows wait
        lake.append("rewards", [{"trajectory_id": held, "reward": 1.0, "success": True}])
        ev = st.step()
    finally:
        st.close()
    assert ev is not None and ev["metrics"]["new_examples"] == 1 and ev["metrics"]["served_rows"] == 1
    assert lines[-1]["event"] == "increment" and lines[-1]["served"] == [{"trajectory_id": held, "reward": 1.0}]
    _emitter(False, False)(lines[-1])
    assert f"increment 1 trains 1 served conversation now trainable: {held} (reward 1.0)" in capsys.readouterr().err
    status = watcher_status(tmp_path / "watch", lake)
    assert status["lag_rows"] == {"trajectories": 0, "rewards": 0}
    with lake.snapshot() as snap:
        assert snap.arrow(f"SELECT split, served FROM sft WHERE trajectory_id = '{held}'").to_pylist() == [
            {"split": "train", "served": True}]
        snap.con.execute("SET VARIABLE sft_served_test_fraction = 0.1")  # opt-in: the same md5 rule holds it out
        assert snap.arrow(f"SELECT split FROM sft WHERE trajectory_id = '{held}'").to_pylist() == [{"split": "test"}]
    held_out = trainer(lake, tmp_path / "held", split="train", served_test_fraction=0.1)
    try:
        assert held_out.step() is None  # its only trainable row is in the test split now
    finally:
        held_out.close()
