"""kill -9 of `lake serve` in the middle of a load from several clients, 10 times, with clients retrying:
every acknowledged trajectory is in the lake exactly once (native ids and Atropos Idempotency-Keys)."""
import random
import threading
import time

import httpx

from tests.fault_figures import record
from tests.ingest_helpers import ServerProcess
from ingest.util import text_hash
from lake import Lake

KILLS = 10
ACKS_PER_KILL = 8  # each kill waits for this many new acks, so every kill lands in a live load, whatever the machine's speed


def _client(url, kind, cid, stop, acked, errors):
    rng = random.Random(cid)
    c = httpx.Client(base_url=url, timeout=10)
    k = 0
    while not stop.is_set():
        k += 1
        if kind == "native":
            n = rng.randint(1, 3)
            ids = [f"c{cid}-{k}-{j}" for j in range(n)]
            recs = [{"trajectory_id": t, "messages": [{"role": "user", "content": t}], "reward": rng.random()}
                    for t in ids]
            req = dict(method="POST", url="/v1/trajectories", json=recs)
        else:
            key = f"c{cid}-{k}"
            gid = "idem-" + text_hash(key)
            ids = [f"{gid}:{j}" for j in range(2)]
            g = {"tokens": [[1, 2, k], [3, 4, k]], "masks": [[-100, 2, k], [-100, 4, k]], "scores": [1.0, 0.0]}
            req = dict(method="POST", url="/scored_data", json=g, headers={"Idempotency-Key": key})
        while True:  # retry the same request until it is acknowledged (what BaseEnv/our clients do)
            try:
                r = c.request(**req)
                if r.status_code == 200:
                    acked.extend(ids)
                    break
                if r.status_code < 500:
                    errors.append((r.status_code, r.text))
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
            if stop.is_set() and stop.hard:
                return


def test_kill9_many_clients_exactly_once(tmp_path):
    Lake.init(tmp_path / "lake")
    srv = ServerProcess(tmp_path / "lake", log_path=tmp_path / "serve.log").start()
    stop = threading.Event()
    stop.hard = False
    acked, errors = [], []
    kinds = ["native", "native", "native", "atropos"]
    threads = [threading.Thread(target=_client, args=(srv.url, kd, i, stop, acked, errors), daemon=True)
               for i, kd in enumerate(kinds)]
    for t in threads:
        t.start()
    rng = random.Random(42)
    acked_before_kill = []
    try:
        for _ in range(KILLS):
            n0 = len(acked)
            deadline = time.monotonic() + 20  # generous: a loaded machine acks slowly, and the floor below rests on it
            time.sleep(rng.uniform(0.2, 0.5))
            while len(acked) < n0 + ACKS_PER_KILL and time.monotonic() < deadline:  # kill in the middle of a live load
                time.sleep(0.05)
            srv.kill()
            acked_before_kill.append(len(acked) - n0)
            srv = ServerProcess(tmp_path / "lake", port=srv.port, log_path=tmp_path / "serve.log").start()
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        stop.hard = True
        srv.kill()
    assert not errors, errors[:3]
    assert all(n >= ACKS_PER_KILL for n in acked_before_kill), acked_before_kill
    with Lake(tmp_path / "lake").snapshot() as snap:
        counts = dict(snap.sql("SELECT trajectory_id, count(*) FROM trajectories GROUP BY 1").fetchall())
    missing = [t for t in acked if t not in counts]
    dups = {t: n for t, n in counts.items() if n > 1}
    record(f"lake serve kill -9 under load ({KILLS} kills, {len(kinds)} retrying clients)", tried=len(acked),
           unit="acknowledged trajectories", lost=len(missing), duplicated=len(dups))
    assert not missing, missing[:5]
    assert not dups, list(dups.items())[:5]
    assert len(set(acked)) == len(acked)
    assert len(acked) >= ACKS_PER_KILL * KILLS
