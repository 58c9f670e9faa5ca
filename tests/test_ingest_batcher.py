"""The server's group commit (ingest.batcher) on a real lake: requests already being parsed when the lake is
idle go into one Delta version; a request that ends without rows does not hold the others back."""
import asyncio
import time

import pyarrow as pa

from ingest.batcher import TableBatcher
from ingest.records import ArrowRows, payload_table, trajectory_type
from lake import Lake


def rows(tid: str) -> ArrowRows:
    return ArrowRows.of(payload_table({"trajectory_id": pa.array([tid]),
                                       "messages": pa.array([[]], trajectory_type("messages"))}, 1), "trajectory")


def test_requests_being_parsed_share_one_version(tmp_path):
    lk = Lake.init(tmp_path / "lake")

    async def scenario():
        b = TableBatcher(lk.writer("test-batcher"), "trajectories", gather_s=5.0)

        async def request(i: int, parse_s: float):
            with b.expect() as expected:
                await asyncio.sleep(parse_s)  # parsing the body; the others arrive meanwhile
                return await b.commit(rows(f"t{i}"), expected)

        async def fails():
            with b.expect():
                await asyncio.sleep(0.01)
                raise ValueError("a bad body")  # leaves without rows: released, nobody waits for it

        t0 = time.perf_counter()
        got = await asyncio.gather(request(0, 0.0), request(1, 0.02), request(2, 0.04), fails(),
                                   return_exceptions=True)
        took = time.perf_counter() - t0
        b.task.cancel()
        return got, took

    got, took = asyncio.run(scenario())
    assert isinstance(got[3], ValueError)
    assert len({r.version for r in got[:3]}) == 1 and all(r.rows == 3 for r in got[:3])
    assert took < 4.0  # waited for the three requests (~0.1 s), not for the 5 s cap: room for a busy machine
    with lk.snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall() == [(3,)]
