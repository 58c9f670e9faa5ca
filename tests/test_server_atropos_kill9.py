"""kill -9 of `lake serve` right after a trainer's /batch confirmed the batch before it (issue 26 item 6).

Before: at-least-once recorded a served batch, and with it the confirmation of the batch before, in the
background up to 1.0 s later; a kill in that second lost the confirmation, and after the restart the
confirmed batch was served again (the trainer trained it twice). Now the record is committed before /batch
answers. Each round: post groups, pull batch A, pull again (batch B, or none: either confirms A), kill -9 at
once, restart; every group of A must never be served again, and every group posted must be served.
"""
import random

import httpx

from tests.fault_figures import record
from tests.ingest_helpers import ServerProcess
from lake import Lake

ROUNDS = 3
REG = {"wandb_group": "", "wandb_project": "", "batch_size": 4, "max_token_len": 64, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 0, "num_steps": 100}


def _group(tag: int) -> dict:
    return {"tokens": [[1, tag], [2, tag]], "masks": [[-100, tag], [-100, tag]], "scores": [1.0, 0.0]}


def _tags(batch) -> list[int]:
    return [g["tokens"][0][1] for g in batch or []]


def test_kill9_after_a_confirming_batch_never_reserves_it(tmp_path):
    Lake.init(tmp_path / "lake")
    rng = random.Random(26)
    srv = standby = ServerProcess(tmp_path / "lake", log_path=tmp_path / "serve.log").start()
    c = httpx.Client(base_url=srv.url, timeout=30)
    assert c.post("/register", json=REG).status_code == 200
    posted, confirmed, served_twice, tag = set(), set(), [], 100
    pending: set[int] = set()  # served, not confirmed when the server died: at-least-once serves them again
    try:
        for _ in range(ROUNDS):
            # the next server imports while this round runs, and takes the port the moment this one dies
            standby = ServerProcess(tmp_path / "lake", port=srv.port, log_path=tmp_path / "serve.log").spawn(120)
            for _ in range(rng.choice([4, 6])):  # 2 or 3 batches of 2 groups (4 sequences)
                tag += 1
                assert c.post("/scored_data", json=_group(tag)).status_code == 200
                posted.add(tag)
            a = _tags(c.get("/batch").json()["batch"])
            assert a, "a batch was ready"
            served_twice += [t for t in a if t in confirmed]
            b = _tags(c.get("/batch").json()["batch"])  # coming back confirms A
            confirmed |= set(a)
            pending = (pending - set(a) - set(b)) | set(b)
            served_twice += [t for t in b if t in confirmed]
            srv.kill()  # SIGKILL at once: no shutdown, nothing flushed
            srv = standby.wait_healthy(60)
            c = httpx.Client(base_url=srv.url, timeout=30)
        while (got := _tags(c.get("/batch").json()["batch"])):  # drain: what is left, each served once
            served_twice += [t for t in got if t in confirmed]
            confirmed |= set(got)
    finally:
        srv.kill()
        standby.kill()
    lost = posted - confirmed - pending
    record(f"confirmed Atropos batches after lake serve kill -9 ({ROUNDS} kills right after a confirming /batch)",
           tried=len(posted), unit="groups", served_twice=len(served_twice), lost=len(lost))
    assert not served_twice, served_twice
    assert not lost, sorted(lost)
