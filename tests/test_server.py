"""`lake serve` as a real subprocess on loopback: Atropos contract, durability across restart, native routes."""
import gzip
import json
import random
import subprocess
import sys
import uuid

import httpx
import orjson
import pytest

from tests.ingest_helpers import ServerProcess
from lake import Lake

REG = {"wandb_group": "", "wandb_project": "", "batch_size": 8, "max_token_len": 256, "checkpoint_dir": "ckpt",
       "save_checkpoint_interval": 2, "starting_step": 0, "num_steps": 3}


def group(rng, n=4, env_id=0, **kw):
    toks = [[rng.randrange(1, 999) for _ in range(rng.randint(3, 8))] for _ in range(n)]
    g = {"tokens": toks, "masks": [[-100] + t[1:] for t in toks], "scores": [float(i % 2) for i in range(n)],
         "advantages": [], "ref_logprobs": [], "images": [], "group_overrides": {},
         "inference_logprobs": [[1.0] + [-(rng.random() / 3) for _ in t[1:]] for t in toks],
         "overrides": [{"temperature": 1.0}] * n,
         "messages": [[{"role": "user", "content": f"q{rng.random()}"},
                       {"role": "assistant", "content": "<think>x</think>a", "reward": 1}] for _ in range(n)],
         "env_id": env_id}
    g.update(kw)
    return g


@pytest.fixture
def lake_root(tmp_path):
    Lake.init(tmp_path / "lake")
    return tmp_path / "lake"


def test_atropos_contract_and_restart(lake_root, tmp_path):
    rng = random.Random(3)
    sent = {}
    srv = ServerProcess(lake_root, log_path=tmp_path / "serve.log").start()
    try:
        c = httpx.Client(base_url=srv.url, timeout=30)
        assert c.get("/").json() == {"message": "AtroposLib API"}
        assert c.get("/info").json() == {"batch_size": -1, "max_token_len": -1}
        assert c.get("/batch").json() == {"status": "error", "message": "Trainer not registered. Call /register first.",
                                          "batch": []}
        r = c.post("/register", json=REG)
        u = r.json()["uuid"]  # a uuid4 as a 128-bit JSON integer (run-api's shape): its version bits put it >= 2**76
        assert isinstance(u, int) and u >= 2 ** 76 and uuid.UUID(int=u).version == 4
        assert c.post("/register", json=dict(REG, batch_size=99)).status_code == 200
        assert c.get("/info").json() == {"batch_size": 8, "max_token_len": 256}
        env = {"max_token_length": 256, "desired_name": "toy", "weight": 1.0, "group_size": 4}
        assert c.post("/register-env", json=env).json() == {"status": "wait for trainer to start"}
        assert c.get("/batch").json() == {"batch": None}
        r = c.post("/register-env", json=env).json()
        assert r["status"] == "success" and r["env_id"] == 0 and r["wandb_name"] == "toy_0"
        assert c.post("/register-env", json=env).json()["wandb_name"] == "toy_1"
        assert c.get("/wandb_info").json() == {"group": "", "project": ""}
        # groups: gzip body like BaseEnv, plus two halves that are buffered and then released together
        for k in range(3):
            g = group(rng)
            r = c.post("/scored_data", content=gzip.compress(json.dumps(g).encode()),
                       headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
            assert r.json() == {"status": "received"}
            sent[g["messages"][0][0]["content"]] = g
        h1, h2 = group(rng, n=2), group(rng, n=2)
        assert c.post("/scored_data", json=h1).json() == {"status": "buffered", "buffer_size": 2}
        r = c.post("/scored_data_list", json=[h2, group(rng, env_id=None)]).json()
        assert r == {"status": "received", "groups_processed": 2, "buffered": 1, "last_buffer_size": 0}
        assert c.get("/status").json() == {"current_step": 0, "queue_size": 6}
        se = c.request("GET", "/status-env", content=json.dumps({"env_id": 0})).json()
        assert se == c.get("/status-env", params={"env_id": 0}).json()
        assert se["max_group_size"] == 4 and se["env_weight"] == 0.5 and se["unallocated_fraction"] == 1.0
        # one batch served before the crash: exactly 8 sequences, all 14 keys, gzip when asked
        r = c.get("/batch", headers={"Accept-Encoding": "gzip"})
        assert r.headers.get("content-encoding") == "gzip"
        b = r.json()["batch"]
        assert sum(len(x["tokens"]) for x in b) == 8
        assert all(len(x) == 14 and x["distill_logprobs"] is None for x in b)
        served_first = {x["messages"][0][0]["content"] for x in b}
        assert c.get("/status").json()["current_step"] == 2  # all formable batches are formed at once
        # the next pull confirms the first batch was delivered; this second one is never confirmed
        b2 = c.get("/batch").json()["batch"]
        assert sum(len(x["tokens"]) for x in b2) == 8
        unconfirmed = {x["messages"][0][0]["content"] for x in b2}
        with Lake(lake_root).snapshot() as snap:  # served records are committed before /batch answers
            assert snap.sql("SELECT count(*) FROM runs WHERE kind = 'atropos.batch'").fetchall()[0][0] == 2
    finally:
        srv.kill()  # SIGKILL: nothing is flushed on the way out
    srv = ServerProcess(lake_root, port=srv.port, log_path=tmp_path / "serve.log").start()
    try:
        c = httpx.Client(base_url=srv.url, timeout=30)
        assert c.get("/info").json() == {"batch_size": 8, "max_token_len": 256}
        # served before the crash: A = [g2, h1, h2] (confirmed), B = [g0, g1] (sent, unconfirmed: at-least-once
        # serves it again); queued after restart: g0, g1 and gN
        assert c.get("/status").json()["queue_size"] == 3
        assert c.get("/status-env", params={"env_id": 1}).status_code == 200
        g = group(rng)
        sent[g["messages"][0][0]["content"]] = g
        assert c.post("/scored_data", json=g).json() == {"status": "received"}
        got = []
        while True:
            b = c.get("/batch").json()["batch"]
            if b is None:
                break
            assert sum(len(x["tokens"]) for x in b) == 8
            got.extend(b)
        keys = {x["messages"][0][0]["content"] for x in got}
        assert not keys & served_first
        assert unconfirmed <= keys
        for x in got:  # served after restart: byte-for-byte what was posted (14 keys, [] stays [])
            k = x["messages"][0][0]["content"]
            if k in sent:
                want = {kk: sent[k].get(kk) for kk in x}
                assert x == want
        assert len(got) == 4 and len(keys) == 4
        every = {g["messages"][0][0]["content"] for g in sent.values()}
        assert every <= keys | served_first  # every full group posted was served exactly once
        assert c.get("/reset_data").text == "Reset successful"
        assert c.get("/info").json()["batch_size"] == -1
    finally:
        srv.kill()
    lk = Lake(lake_root)
    with lk.snapshot() as snap:
        n = snap.sql("SELECT count(*) FROM trajectories WHERE event_type='atropos.group'").fetchall()[0][0]
        kinds = dict(snap.sql("SELECT kind, count(*) FROM runs GROUP BY kind").fetchall())
    assert n == 3 * 4 + 2 + 2 + 4 + 4
    assert kinds["atropos.batch"] == 4 and kinds["atropos.register"] == 1 and kinds["atropos.reset"] == 1


def test_native_routes_auth_limits(lake_root, tmp_path):
    srv = ServerProcess(lake_root, token="s3cret", extra=["--max-body-mb", "0.5", "--max-inflated-mb", "1"],
                        log_path=tmp_path / "serve.log").start()
    try:
        c = httpx.Client(base_url=srv.url, timeout=30)
        auth = {"Authorization": "Bearer s3cret"}
        rec = {"trajectory_id": "t-1", "messages": [{"role": "user", "content": "hi"}], "reward": 1.0}
        assert c.post("/v1/trajectories", json=rec).status_code == 401
        assert c.post("/v1/trajectories", json=rec, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/batch").status_code == 401
        assert c.get("/status").status_code == 401  # reads too: every route but health needs the token
        assert c.get("/v1/health").status_code == 200
        r = c.post("/v1/trajectories", json=rec, headers=auth)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        assert c.post("/v1/trajectories", json=rec, headers=auth).json()["duplicates"] == 1
        nd = b"\n".join(orjson.dumps({"trajectory_id": f"n{i}", "messages": [{"role": "user", "content": str(i)}]})
                        for i in range(3)) + b"\n"
        r = c.post("/v1/trajectories", content=gzip.compress(nd),
                   headers={**auth, "Content-Encoding": "gzip", "Content-Type": "application/x-ndjson"})
        assert r.json()["accepted"] == 3
        # Idempotency-Key without ids: the retry is acknowledged, not written twice
        body = {"messages": [{"role": "user", "content": "no id"}]}
        h = {**auth, "Idempotency-Key": "k-1"}
        assert c.post("/v1/trajectories", json=body, headers=h).json()["accepted"] == 1
        assert c.post("/v1/trajectories", json=body, headers=h).json()["duplicates"] == 1
        r = c.post("/v1/rewards", json={"trajectory_id": "t-1", "reward": 0.25, "label_source": "human"}, headers=auth)
        assert r.status_code == 200
        assert c.post("/v1/rewards", json={"trajectory_id": "nope", "reward": 1}, headers=auth).status_code == 404
        skill = "---\nname: demo-skill\ndescription: d\n---\n# Demo\nsteps\n"
        r = c.post("/v1/skills", json={"content": skill, "category": "demo"}, headers=auth)
        assert r.json()["status"] == "committed"
        assert c.post("/v1/skills", json={"content": skill, "category": "demo"}, headers=auth).json()["status"] == "unchanged"
        js = {**auth, "Content-Type": "application/json"}
        assert c.post("/v1/trajectories", content=b"x" * (600 << 10), headers=js).status_code == 413
        bomb = gzip.compress(b"[" + b" " * (3 << 20) + b"]")
        assert c.post("/v1/trajectories", content=bomb, headers={**js, "Content-Encoding": "gzip"}).status_code == 413
        st = c.get("/v1/stats", headers=auth).json()
        assert st["acked_rows"] == 1 + 3 + 1 and st["duplicates"] == 2
    finally:
        srv.kill()
    with Lake(lake_root).snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 5
        assert snap.sql("SELECT reward FROM rewards").fetchall() == [(0.25,)]
        assert snap.sql("SELECT name, category FROM skills").fetchall() == [("demo-skill", "demo")]


def test_same_records_posted_or_imported_are_stored_once(lake_root, tmp_path):
    """Defect 18: one id rule for POST /v1/trajectories and `lake import` (the record's trajectory_id, else one
    derived from its content; Atropos groups from content and position), so the same body posted twice, or
    posted and then imported, is stored once. Only an Idempotency-Key gives ids of its own."""
    native = {"messages": [{"role": "user", "content": "no id"}, {"role": "assistant", "content": "ok"}]}
    hermes = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    atropos = {"tokens": [[1, 2], [3, 4]], "masks": [[-100, 2], [-100, 4]], "scores": [1.0, 0.0]}
    files = {"native.jsonl": [native], "hermes.jsonl": [hermes], "groups.jsonl": [atropos, atropos]}
    bodies = {name: b"".join(orjson.dumps(x) + b"\n" for x in recs) for name, recs in files.items()}
    srv = ServerProcess(lake_root, log_path=tmp_path / "serve.log").start()
    try:
        c = httpx.Client(base_url=srv.url, timeout=30)
        nd = {"Content-Type": "application/x-ndjson"}
        for name, body in bodies.items():  # a file's lines posted as NDJSON, twice
            first = c.post("/v1/trajectories", content=body, headers=nd).json()
            assert first["accepted"] == len(files[name]) * (2 if name == "groups.jsonl" else 1)
            again = c.post("/v1/trajectories", content=body, headers=nd).json()
            assert again["accepted"] == 0 and again["duplicates"] == first["accepted"]
            assert again["trajectory_ids"] == first["trajectory_ids"]
        assert c.post("/v1/trajectories", json=native).json()["duplicates"] == 1  # one object, not NDJSON
        keyed = c.post("/v1/trajectories", json=native, headers={"Idempotency-Key": "k"}).json()
        assert keyed["accepted"] == 1 and keyed["trajectory_ids"][0].startswith("idem-")
    finally:
        srv.kill()
    for name, body in bodies.items():
        (tmp_path / "in" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_bytes(body)
    r = subprocess.run([sys.executable, "-c", "from lachesis.cli import main; main()", "import",
                        str(tmp_path / "in"), "--lake", str(lake_root), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["appended"] == 0 and json.loads(r.stdout)["duplicates"] == 1 + 1 + 4
    with Lake(lake_root).snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 6 + 1
