"""What `lake serve` holds while it runs (typed, on `app.state.ingest`): the lake and its writer, the dedupe
indexes, the Atropos queue, the per-table batchers and the counters behind /v1/stats.

Everything here is loaded from the lake at start, so a restarted server knows every id it acknowledged and
serves the Atropos groups it had not served yet.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

import orjson
import pyarrow as pa

from ground.ids import uuid7
from ingest import atropos as A
from ingest.atropos_queue import AtroposQueue, Event, event_from_run, event_record
from ingest.batcher import CommitFailed, Expected, TableBatcher
from ingest.config import ServeConfig
from ingest.dedupe import BodyHashes, Idempotency, KeyGuard, idempotency_guard, trajectory_guard
from ingest.owners import Owners
from ingest.records import ArrowRows, validated_batch
from lake import Lake
from lake.lake import Writer, process_writer_id

log = logging.getLogger("lachesis.ingest.state")

@dataclass
class Counters:
    requests: int = 0
    acked_rows: int = 0
    duplicates: int = 0
    rejected: int = 0
    commit_failures: int = 0


@dataclass
class IngestState:
    config: ServeConfig
    lake: Lake
    writer: Writer
    ids: set[str] = field(default_factory=set)  # trajectory ids in the lake or committed since start
    idem_keys: set[str] = field(default_factory=set)  # "<table>:<Idempotency-Key>" committed (rewards, skills)
    # the same indexes as the lake's commit guards: rows another process committed meanwhile are dropped at
    # commit time, under the table's cross-process lock (ingest.dedupe)
    guards: dict[str, KeyGuard] = field(default_factory=dict)
    bodies: Optional[BodyHashes] = None  # the body each Idempotency-Key was committed with (a reuse is a 409)
    owners: Optional[Owners] = None  # which client posted a trajectory (rewards: ingest.owners)
    host_names: Optional[frozenset] = None  # Host header names accepted besides addresses (None: any; ingest.http)
    skill_hash: dict[str, str] = field(default_factory=dict)  # skill name -> sha256 of its current version
    queue: AtroposQueue = field(default_factory=AtroposQueue)
    inflight: dict[str, asyncio.Future] = field(default_factory=dict)  # ids claimed by a request in progress
    batch_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # /batch and /reset_data, one at a time
    state_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # registration, env changes, resets
    batchers: dict[str, TableBatcher] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    latencies: deque = field(default_factory=lambda: deque(maxlen=5000))
    started_at: float = field(default_factory=time.time)

    # -- start-up --------------------------------------------------------------------------------------
    @classmethod
    def load(cls, lake: Lake, config: ServeConfig, writer_name: str = "ingest-http") -> "IngestState":
        """Indexes and the Atropos queue from the lake (blocking: run it in a thread)."""
        st = cls(config, lake, lake.writer(process_writer_id(writer_name)), bodies=BodyHashes(lake),
                 owners=Owners(lake))
        st.guards["trajectories"] = trajectory_guard(lake)
        st.ids = st.guards["trajectories"].keys
        for table in ("rewards", "skills"):
            st.guards[table] = idempotency_guard(lake, table, st.idem_keys)
        with lake.snapshot() as snap:
            # a skill's versions in the order skills_current.sql sees them
            for r in snap.arrow("SELECT name, json_extract_string(metadata, '$.sha256') AS h, deleted FROM skills "
                                "ORDER BY occurred_at, event_id").to_pylist():
                if r["deleted"]:
                    st.skill_hash.pop(r["name"], None)
                elif r["h"]:
                    st.skill_hash[r["name"]] = r["h"]
            st.queue = _restore_queue(snap)
        return st

    # -- commits ---------------------------------------------------------------------------------------
    def _batcher(self, table: str) -> TableBatcher:
        if table not in self.batchers:
            self.batchers[table] = TableBatcher(self.writer, table)
        return self.batchers[table]

    def expect(self, table: str) -> Expected:
        """Tell `table`'s batcher a request is on its way (see TableBatcher)."""
        return self._batcher(table).expect()

    async def commit_arrow(self, table: str, rows: ArrowRows, *, expected: Expected | None = None):
        try:
            return await self._batcher(table).commit(rows, expected)
        except CommitFailed:
            self.counters.commit_failures += 1
            raise

    async def commit_records(self, table: str, records: list[dict], *, locs=None):
        """Validate native records with the lake's checker (a 422 naming the field) and commit them."""
        batch = validated_batch(records, table, locs=locs if locs is not None else [None] * len(records))
        return await self.commit_arrow(table, batch.arrow())

    async def record(self, ev: Event):
        """Commit an Atropos queue event as a `runs` row (before it is applied and answered: every event,
        served batches and their confirmations included, is durable once a client hears of it)."""
        rec = event_record(ev)
        rec["run_id"] = f"{rec['kind']}-{uuid7()}"
        return await self.commit_records("runs", [rec])

    # -- dedupe ----------------------------------------------------------------------------------------
    async def claim(self, key: str, done: set[str] | None = None) -> bool:
        """True when `key` is new and now claimed by the caller (who must `release` it); False when the key is
        in `done` (the lake's keys; default: trajectory ids), or once the request that had claimed it committed
        it. Requests with one key thus run one at a time: the second waits for the first's outcome."""
        done = self.ids if done is None else done
        while True:
            if key in done:
                return False
            fut = self.inflight.get(key)
            if fut is None:
                self.inflight[key] = asyncio.get_running_loop().create_future()
                return True
            await asyncio.shield(fut)  # the other request finished (committed or not): look again

    def release(self, keys: Iterable[tuple[str, set[str]]], committed: bool) -> None:
        for k, done in keys:
            fut = self.inflight.pop(k, None)
            if committed:
                done.add(k)
            if fut is not None and not fut.done():
                fut.set_result(committed)

    async def same_body(self, scope: str, idem: Idempotency, table: str, row_id: str | None = None) -> None:
        """A keyed request found to be a duplicate: a 409 when its key came with another body (BodyHashes)."""
        await asyncio.to_thread(self.bodies.check, scope, idem, table, row_id)

    def claims(self) -> "Claims":
        return Claims(self)

    # -- /v1/stats -------------------------------------------------------------------------------------
    def stats(self, versions: dict) -> dict:
        lat = sorted(self.latencies)

        def pct(p):
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else None

        batchers = dict(self.batchers)
        q = self.queue
        return {**asdict(self.counters), "trajectory_ids": len(self.ids), "queue_groups": len(q.queue),
                "buffered_groups": sum(len(v) for v in q.buffer.values()), "served_batches": q.served,
                "step": q.step, "commits": {t: b.commits for t, b in batchers.items()},
                "commit_timing": {t: b.timing() for t, b in batchers.items()},
                "ack_ms": {"p50": pct(0.5), "p99": pct(0.99)}, "versions": versions}


class Claims:
    """The ids one request claims; all released on exit, as committed only when the block ended normally.

    Releasing in `__aexit__` is what keeps a failed request (a bad later group, a commit error, a client that
    went away) from leaving a claim behind that every retry with the same key would wait on forever.
    """

    def __init__(self, state: IngestState):
        self.state = state
        self.keys: list[tuple[str, set[str]]] = []

    async def take(self, key: str, done: set[str] | None = None) -> bool:
        """True when the caller should write `key`; False for a duplicate (`done`: as in IngestState.claim)."""
        if await self.state.claim(key, done):
            self.keys.append((key, self.state.ids if done is None else done))
            return True
        return False

    async def __aenter__(self) -> "Claims":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.state.release(self.keys, committed=exc_type is None)


def _restore_queue(snap) -> AtroposQueue:
    events = []
    for r in snap.arrow("SELECT kind, config, metadata FROM runs WHERE kind LIKE 'atropos.%' "
                        "ORDER BY ingested_at, event_id").to_pylist():
        ev = event_from_run(r["kind"], r["config"], r["metadata"])
        if ev is not None:
            events.append(ev)

    def unsettled_groups(settled: frozenset):
        con = snap.con
        con.register("__settled", pa.table({"group_id": pa.array(sorted(settled), pa.string())}))
        rows = con.sql(
            "SELECT trajectory_id, group_id, tokens, masks, inference_logprobs, advantages, overrides, messages, "
            "reward, raw, json_extract_string(metadata, '$.atropos.qseq') AS qseq FROM trajectories "
            "WHERE event_type = 'atropos.group' AND group_id NOT IN (SELECT group_id FROM __settled)"
        ).to_arrow_table().to_pylist()
        groups: dict[str, list] = {}
        for r in rows:
            groups.setdefault(r["group_id"], []).append(r)
        ordered = sorted(groups.items(), key=lambda kv: (kv[1][0]["qseq"] or "", kv[0]))
        if ordered:
            log.info("restored %d unserved Atropos groups", len(ordered))
        for gid, grows in ordered:
            d = A.rows_to_group(grows)
            yield A.QGroup(gid, len(d["tokens"]), d["env_id"], orjson.dumps(d), grows[0]["qseq"] or "")

    return AtroposQueue.restore(events, unsettled_groups)

