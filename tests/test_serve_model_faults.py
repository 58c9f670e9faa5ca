"""Fault injection on `lake serve-model` (issue 38, `just faults`): kill -9 of the server while it records with
`--record sync` (every response a client received is in the lake exactly once), and a follower fed bad increments
between good ones (every good one served, in order; no bad one served). Each records its figure
(tests/fault_figures.py) before asserting. The kill -9 test is slow (marked `fault`: `just faults` runs it).
"""
from __future__ import annotations

import random
import shutil
import threading
import time

import httpx
import pytest

from ingest_helpers import ServerProcess
from serve_model_helpers import running
from test_serve_model_follow_bad import fifo, garbage, increment, new_run, pickle_adapter, pickle_model, truncated
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from lake import Lake
from serving.config import ServeModelConfig
from tests.fault_figures import record

KILLS = 3
ANSWERS_PER_KILL = 5  # each kill waits for this many new answers, so it lands in a live load on any machine
CLIENTS = 3


def _client(url: str, cid: int, stop: threading.Event, received: list, errors: list) -> None:
    c = httpx.Client(base_url=url, timeout=30)
    k = 0
    while not stop.is_set():
        k += 1
        try:
            r = c.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": f"client {cid} call {k}"}],
                "max_tokens": 3, "temperature": 0})
        except httpx.HTTPError:  # the server was killed: this call was never answered
            time.sleep(0.05)
            continue
        if r.status_code == 200:
            received.append(r.json()["id"])
        elif r.status_code < 500:
            errors.append((r.status_code, r.text))


@pytest.mark.slow  # 4 starts of the server: 1-3 min on 2 busy cores; `just faults` runs it
@pytest.mark.fault
def test_kill9_while_recording_sync_every_received_answer_is_in_the_lake_once(tiny_dir, tmp_path):
    lake = tmp_path / "lake"
    Lake.init(lake)

    def server(port=None):
        return ServerProcess(lake, port=port, command="serve-model", log_path=tmp_path / "serve-model.log",
                             extra=["--model", "tiny", "--record", "sync", "--threads", "1"]).start(timeout=120)

    srv = server()
    stop, received, errors = threading.Event(), [], []
    threads = [threading.Thread(target=_client, args=(srv.url, i, stop, received, errors), daemon=True)
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    rng, answered_before_kill = random.Random(7), []
    try:
        for _ in range(KILLS):
            n0, deadline = len(received), time.monotonic() + 60
            time.sleep(rng.uniform(0.1, 0.4))
            while len(received) < n0 + ANSWERS_PER_KILL and time.monotonic() < deadline:
                time.sleep(0.02)
            srv.kill()
            answered_before_kill.append(len(received) - n0)
            srv = server(srv.port)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        srv.kill()
    with Lake.open(lake).snapshot() as snap:
        counts = dict(snap.sql("SELECT json_extract_string(metadata, '$.request_id'), count(*) FROM trajectories "
                               "GROUP BY 1").fetchall())
    lost = [r for r in received if r not in counts]
    duplicated = [r for r in received if counts.get(r, 0) > 1]
    record(f"lake serve-model kill -9 with --record sync ({KILLS} kills, {CLIENTS} clients)", tried=len(received),
           unit="answers received", lost=len(lost), duplicated=len(duplicated))
    assert not errors, errors[:3]
    assert all(n >= ANSWERS_PER_KILL for n in answered_before_kill), answered_before_kill
    assert not lost and not duplicated, (lost[:5], duplicated[:5])
    assert len(set(received)) == len(received)


# good increments with bad ones written between them (the bad ones just before the next good one, so the follower
# meets them together); a stray .bak copy too
STEPS = [(2, None), (3, truncated), (4, None), (5, garbage), (6, pickle_adapter), (7, None), (8, pickle_model),
         (9, fifo), ("bak", None), (10, None), (11, truncated), (12, None)]


def _served(app) -> str:
    return app.state.serving.engine.versions()[-1].name


def test_follower_fed_bad_increments_between_good_ones_serves_every_good_one_in_order(tiny_dir, tmp_path):
    run = new_run(tmp_path)
    increment(run, "step-00000001", tiny_dir)
    goods = [1] + [n for n, spoil in STEPS if spoil is None and n != "bak"]
    answered: list[int] = [1]
    cfg = ServeModelConfig(model="tiny", follow=str(run), record="off", threads=1, poll_interval=0.05)
    with running(cfg) as (url, app):
        for n, spoil in STEPS:
            if n == "bak":
                shutil.copytree(run / "checkpoints" / "step-00000001", run / "checkpoints" / "step-00000099.bak")
                continue
            increment(run, f"step-{n:08d}", tiny_dir, spoil)
            if spoil is not None:
                continue
            deadline = time.monotonic() + 30
            while _served(app) != f"tiny@watch:{n}" and time.monotonic() < deadline:
                time.sleep(0.05)
            r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            if r.status_code == 200:
                answered.append(int(r.json()["model"].rpartition(":")[2]))
        events = httpx.get(url + "/v1/health", timeout=5).json()["follow"]
        alive = app.state.serving.follower._thread.is_alive()
    served = [e["increment"] for e in events if e["event"] == "served"]
    refused = {e["increment"] for e in events if e["event"] == "refused"}
    bad = [n for n, spoil in STEPS if spoil is not None]
    record("serve-model --follow fed bad increments between good ones "
           f"({len(bad)} bad, a stray .bak)", tried=len(goods), unit="good increments",
           not_served=len(set(goods) - set(answered)), out_of_order=int(answered != sorted(answered)),
           bad_served=len(set(bad) & set(served)))
    assert alive
    assert answered == goods, (answered, events)
    assert served == goods[1:], events
    assert refused == set(bad), events
