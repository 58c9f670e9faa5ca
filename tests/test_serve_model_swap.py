"""`lake serve-model --follow`: while a client sends requests in a loop, the real streaming trainer writes two
increments; responses switch to each new version with no failed request, and every recorded row names the version
that answered it. --keep-versions unloads the oldest; --promote-if-better skips an increment whose evaluation fell."""
from __future__ import annotations

import threading
import time

from serve_model_helpers import client, lake_rows, running
from test_train_watch import FAST, good_batch  # the streaming trainer's own tests' fast settings and rows
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from lake import Lake
from serving.config import ServeModelConfig
from trainers.watch.loop import StreamTrainer
from trainers.watch.config import WatchConfig


def wait_for(pred, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_hot_swap_two_increments_no_failed_request(tiny_dir, tmp_path):
    train_lake = Lake.init(tmp_path / "train-lake")
    trainer = StreamTrainer(WatchConfig(lake_root=str(train_lake.root), output=str(tmp_path / "watch"), **FAST))
    cfg = ServeModelConfig(model="tiny", follow=str(tmp_path / "watch"), lake_root=str(tmp_path / "served"),
                           threads=1, poll_interval=0.1, keep_versions=2)
    answers, failures, stop = [], [], threading.Event()
    v1, v2 = (f"tiny@{trainer.meta['serial']}:{n}" for n in (1, 2))  # versions named by the trainer's run id
    try:
        with running(cfg) as (url, app):
            def loop():
                oa = client(url)
                while not stop.is_set():
                    try:
                        raw = oa.chat.completions.with_raw_response.create(
                            model="tiny", messages=[{"role": "user", "content": "status?"}], max_tokens=3,
                            temperature=0)
                        r = raw.parse()
                        answers.append((r.id, r.model, raw.headers["x-lachesis-trajectory"]))
                    except Exception as exc:  # noqa: BLE001 - every failure is counted and asserted below
                        failures.append(repr(exc))

            worker = threading.Thread(target=loop)
            worker.start()
            try:
                wait_for(lambda: len(answers) >= 2)
                for n in (1, 2):
                    train_lake.append("trajectories", good_batch(6, 100 * n))
                    assert trainer.step() is not None
                    wait_for(lambda: any(m == f"tiny@{trainer.meta['serial']}:{n}" for _, m, _ in answers[-3:]))
                n_seen = len(answers)
                wait_for(lambda: len(answers) >= n_seen + 2)
            finally:
                stop.set()
                worker.join()
            models = app.state.serving.engine.versions()
            events = app.state.serving.follower.events
    finally:
        trainer.close()
    assert failures == []
    order = [m for _, m, _ in answers]
    assert order[0] == "tiny@base" and {v1, v2} <= set(order)
    first = {m: order.index(m) for m in ("tiny@base", v1, v2)}
    assert first["tiny@base"] < first[v1] < first[v2]
    assert order.index(v2) > max(i for i, m in enumerate(order) if m == "tiny@base")  # no going back
    assert [v.name for v in models] == [v1, v2]  # --keep-versions 2: the base was unloaded
    assert [e["event"] for e in events] == ["served", "served"]
    print("increment written -> served (s):", [e["written_to_served_s"] for e in events])
    rows = {r["metadata"]["request_id"]: r for r in lake_rows(tmp_path / "served")}
    assert len(rows) == len(answers)
    assert all(rows[i]["policy_version"] == m for i, m, _ in answers)
    sha = {r["policy_version"]: r["metadata"]["adapter_sha256"] for r in rows.values()}
    assert sha["tiny@base"] is None and sha[v1] != sha[v2] and len(sha[v2]) == 64


def test_promote_if_better_skips_an_increment_whose_eval_fell(tiny_dir, tmp_path):
    """The trainer's evaluation events (runs, kind eval, adapter_path = the increment's weights) decide: increments 1
    (success 0.25) and 2 (0.5) are served, 3 (0.0) is skipped, 4 (its evaluation not landed yet) is waited for."""
    from serving.app import load_engine

    lake = Lake.init(tmp_path / "lake")
    trainer = StreamTrainer(WatchConfig(lake_root=str(lake.root), output=str(tmp_path / "watch"), eval_every=1,
                                        **FAST))
    trainer.evaluate = lambda weights: None  # the evaluations are appended below, with chosen success rates
    cfg = ServeModelConfig(model="tiny", follow=str(tmp_path / "watch"), promote_if_better=True, record="off",
                           lake_root=str(lake.root), threads=1, poll_interval=0.1)
    engine, follower = load_engine(cfg)
    engine.start()
    try:
        assert [v.name for v in engine.versions()] == ["tiny@base"]
        for n in (1, 2, 3, 4):
            lake.append("trajectories", good_batch(4, 100 * n))
            assert trainer.step() is not None
        weights = {n: str(tmp_path / "watch" / "checkpoints" / f"step-{n:08d}" / "weights") for n in (1, 2, 3, 4)}
        lake.append("runs", [{"run_id": f"eval-{n}", "kind": "eval", "adapter_path": weights[n],
                              "metrics": {"success_rate": rate}} for n, rate in ((1, 0.25), (2, 0.5), (3, 0.0))])
        follower.poll()
        assert [(e["increment"], e["event"]) for e in follower.events] == [(1, "served"), (2, "served"),
                                                                           (3, "skipped")]
        assert follower.events[2]["detail"] == "eval success 0.000 < 0.500 served"
        serial = trainer.meta["serial"]
        assert [v.name for v in engine.versions()] == [f"tiny@{serial}:1", f"tiny@{serial}:2"]
        lake.append("runs", [{"run_id": "eval-4", "kind": "eval", "adapter_path": weights[4],
                              "metrics": {"success_rate": 0.5}}])
        follower.poll()  # 4's evaluation landed and did not fall: served
        assert follower.events[-1]["event"] == "served" and engine.versions()[-1].name == f"tiny@{serial}:4"
    finally:
        engine.close()
        trainer.close()
