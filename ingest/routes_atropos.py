"""The 13 Atropos run-api routes (atroposlib 0.4.0 shapes, docs/atropos-api.md), backed by the lake.

Each state change is committed as an event before it is acknowledged, then applied to the queue
(`ingest.atropos_queue`); groups are committed as trajectory rows before `received` is answered.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import orjson
import pyarrow as pa
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from edge.errors import BadInput
from edge.guards import parse_json
from ground.ids import uuid7
from ingest import atropos as A
from ingest.atropos_queue import GroupQueued, Registered, Started
from ingest.batcher import Expected
from ingest.groups import ParsedGroup, from_model, parse_fast, parse_group
from ingest.dedupe import Idempotency
from ingest.http import (WRITE, ValidationDetail, bigjson, body_bytes, expect_trajectories, get_state, idempotency,
                         json_body, json_response_async, model_body, validate_model)
from ingest.records import ArrowRows
from ingest.state import IngestState
from ingest.util import text_hash

router = APIRouter()


# -- groups: validation and rows (everything checked before anything is claimed or written) -------------------
class Group:
    """One checked group of a request: its id, its lake rows (Arrow) and the JSON /batch will serve."""

    def __init__(self, pg: ParsedGroup, gid: str, env_name: str | None, loc: list, idem: Idempotency | None,
                 client: str = ""):
        # a named token's name goes into each row's metadata.client, as on /v1/trajectories (ingest.owners)
        meta = {**(idem.metadata() if idem else {}), **({"client": client} if client else {})}
        try:  # numbers that JSON cannot hold (an int beyond 64 bits in an override, say) are a 422, not a 500
            self.body = pg.served()
            self.rows = pg.table(group_id=gid, env_name=env_name, qseq=uuid7(), meta=meta or None)
        except (TypeError, OverflowError, ValueError) as exc:
            raise BadInput(f"value out of range: {exc}", field=loc, status=422, kind="value_error") from None
        self.gid, self.size, self.env_id = gid, pg.size, pg.env_id

    def queued(self) -> GroupQueued:
        return GroupQueued(A.QGroup(self.gid, self.size, self.env_id, self.body))


def _group_id(idem: Idempotency | None, suffix: str = "") -> str:
    """With an Idempotency-Key the id is derived from it (a retry is a duplicate); without one it is fresh:
    identical groups are legitimate in Atropos, so content is not deduplicated."""
    return ("idem-" + text_hash(idem.key + suffix)) if idem else uuid7()


async def commit_groups(s: IngestState, groups: list[Group], idem: Idempotency | None, route: str,
                        expected: Expected) -> list[dict | None]:
    """Commit the groups' rows in one lake submit, then queue them in order. With an Idempotency-Key a group
    already committed is skipped (None in the answer list), unless the key came with another body (409,
    nothing written). Claims are released whatever happens."""
    async with s.claims() as claims:
        fresh = [g for g in groups if not idem or await claims.take(f"{g.gid}:0")]
        if idem and len(fresh) < len(groups):
            await s.same_body(route, idem, "trajectories", next(f"{g.gid}:0" for g in groups if g not in fresh))
        if fresh:
            payload = fresh[0].rows if len(fresh) == 1 else pa.concat_tables([g.rows for g in fresh])
            res = await s.commit_arrow("trajectories", ArrowRows.of(payload, "atropos.group",
                                                                    datetime.now(timezone.utc)), expected=expected)
            if res.skipped:  # keyed groups another process (a second server on this lake) committed meanwhile
                lost = s.guards["trajectories"].pop_dropped(f"{g.gid}:{i}" for g in fresh
                                                            for i in range(g.rows.num_rows))
                fresh = [g for g in fresh if f"{g.gid}:0" not in lost]
                if idem and not fresh:  # none of ours written: the other body wins, ours is a 409
                    await s.same_body(route, idem, "trajectories", f"{groups[0].gid}:0")
            if idem and not res.skipped:  # (groups another process committed first carry its body, not ours)
                s.bodies.committed(route, idem)
    for g in fresh:
        s.ids.update(f"{g.gid}:{i}" for i in range(g.rows.num_rows))
    s.counters.acked_rows += sum(g.rows.num_rows for g in fresh)
    s.counters.duplicates += len(groups) - len(fresh)
    fresh_ids = {id(g) for g in fresh}
    return [s.queue.apply(g.queued()) if id(g) in fresh_ids else None for g in groups]


async def scored_data_body(data: bytes = Depends(body_bytes)) -> ParsedGroup:
    """One group (the hot path of an env): parsed once by orjson and checked by Arrow (`ingest.groups`); a
    body of another shape is validated by the pydantic model, whose 422 is run-api's."""
    try:
        pg = parse_fast(orjson.loads(data))
    except orjson.JSONDecodeError:
        pg = None
    if pg is not None:
        return pg
    try:
        sd = A.ScoredDataX.model_validate_json(data)
    except ValidationError as exc:
        if not data.strip() or any(e["type"] == "json_invalid" for e in exc.errors()):
            parse_json(data)  # the same 422 as every other route for a body that is not JSON
            raise BadInput("JSON decode error", field=["body"], status=422, kind="json_invalid") from None
        raise ValidationDetail(A.validation_detail(exc)) from None
    return from_model(sd, sd.model_extra or {}, ["body"])


async def scored_data_list_body(obj=Depends(json_body)) -> list[ParsedGroup]:
    """A list of groups, every one validated (all errors reported, nothing written when any is bad)."""
    if not isinstance(obj, list):
        raise ValidationDetail([{"type": "list_type", "loc": ["body"], "msg": "Input should be a valid list",
                                 "input": None}])
    errs, out = [], []
    for i, g in enumerate(obj):
        try:
            out.append(parse_group(g, ["body", i]))
        except ValidationError as exc:
            errs.extend(A.validation_detail(exc, prefix=("body", i)))
    if errs:
        raise ValidationDetail(errs)
    return out


async def env_identifier(request: Request) -> A.EnvIdentifier:
    """/status-env: `?env_id=` or, as real envs send it, a JSON body on a GET."""
    env_id = request.query_params.get("env_id")
    if env_id is not None:
        return validate_model(A.EnvIdentifier, {"env_id": env_id})
    return validate_model(A.EnvIdentifier, parse_json(await body_bytes(request, await get_state(request))))


# -- routes ------------------------------------------------------------------------------------------------
@router.get("/")
async def root():
    return {"message": "AtroposLib API"}


@router.post("/register", dependencies=WRITE)
async def register(reg: A.Registration = Depends(model_body(A.Registration)),
                   s: IngestState = Depends(get_state)):
    async with s.state_lock:
        if not s.queue.registered:  # later calls only add a requester (run-api does not reset on them)
            ev = Registered(reg.model_dump())
            await s.record(ev)
            s.queue.apply(ev)
    return bigjson({"uuid": uuid.uuid4().int})


@router.get("/info")
async def info(s: IngestState = Depends(get_state)):
    q = s.queue
    if not q.registered:
        return {"batch_size": -1, "max_token_len": -1}
    return {"batch_size": q.batch_size, "max_token_len": q.max_token_len}


@router.get("/wandb_info")
async def wandb_info(s: IngestState = Depends(get_state)):
    return {"group": s.queue.group, "project": s.queue.project}


@router.post("/register-env", dependencies=WRITE)
async def register_env(re_: A.RegisterEnv = Depends(model_body(A.RegisterEnv)),
                       s: IngestState = Depends(get_state)):
    if re_.min_batch_allocation is not None and not 0.0 <= re_.min_batch_allocation <= 1.0:
        raise BadInput("min_batch_allocation must be between 0 and 1", field=["body", "min_batch_allocation"],
                       status=422, kind="value_error")
    async with s.state_lock:
        if not s.queue.started:
            return {"status": "wait for trainer to start"}
        ev = s.queue.env_event(re_)
        await s.record(ev)
        return s.queue.apply(ev)


@router.post("/disconnect-env", dependencies=WRITE)
async def disconnect_env(ident: A.EnvIdentifier = Depends(model_body(A.EnvIdentifier)),
                         s: IngestState = Depends(get_state)):
    async with s.state_lock:
        ev = s.queue.disconnect_event(ident.env_id)
        if ev is None:
            return {"status": "failure", "error": "list index out of range"}
        await s.record(ev)
        return s.queue.apply(ev)


@router.get("/status-env")
async def status_env(ident: A.EnvIdentifier = Depends(env_identifier), s: IngestState = Depends(get_state)):
    try:
        return s.queue.status_env(ident.env_id)
    except IndexError:  # run-api answers 500 here; an unknown id is the client's mistake
        return JSONResponse({"detail": f"unknown env_id {ident.env_id}"}, status_code=404)


@router.post("/scored_data", dependencies=WRITE)
async def scored_data(request: Request, expected: Expected = Depends(expect_trajectories),
                      pg: ParsedGroup = Depends(scored_data_body), idem: Idempotency | None = Depends(idempotency),
                      s: IngestState = Depends(get_state)):
    g = Group(pg, _group_id(idem), s.queue.env_name(pg.env_id), ["body"], idem, request.state.client)
    res = (await commit_groups(s, [g], idem, "scored_data", expected))[0]
    return {"status": "received", "duplicate": True} if res is None else res


@router.post("/scored_data_list", dependencies=WRITE)
async def scored_data_list(request: Request, expected: Expected = Depends(expect_trajectories),
                           items: list[ParsedGroup] = Depends(scored_data_list_body),
                           idem: Idempotency | None = Depends(idempotency), s: IngestState = Depends(get_state)):
    # every group is checked before any is claimed: a bad later group leaves nothing claimed or written
    groups = [Group(pg, _group_id(idem, f"#{i}"), s.queue.env_name(pg.env_id), ["body", i], idem,
                    request.state.client) for i, pg in enumerate(items)]
    results = await commit_groups(s, groups, idem, "scored_data_list", expected)
    buffered = [r for r in results if r is not None and r["status"] == "buffered"]
    out = {"status": "received", "groups_processed": len(groups)}
    if buffered:
        out["buffered"] = len(buffered)
        out["last_buffer_size"] = buffered[-1]["buffer_size"]
    return out


@router.get("/batch", dependencies=WRITE)
async def batch(request: Request, s: IngestState = Depends(get_state)):
    async with s.batch_lock:
        q = s.queue
        if not q.registered:
            return {"status": "error", "message": "Trainer not registered. Call /register first.", "batch": []}
        if not q.started:
            await s.record(Started())
            q.apply(Started())
        b = q.next_batch()
        if b is None:
            # the trainer pulls one batch at a time: coming back confirms the batches it was sent before, and
            # the confirmation is committed before the answer (a kill right after it must not re-serve them)
            ev = q.confirm_event()
            if ev is not None:
                await s.record(ev)
                q.apply(ev)
            return {"batch": None}
        # committed before the batch leaves, in both modes. at-least-once: the event confirms the batches sent
        # before (the trainer came back for more) and the new one is settled by the next pull; a batch sent but
        # unconfirmed when the server dies is served again after a restart. at-most-once: settled now, a batch
        # lost in flight is not re-sent. (Before, at-least-once recorded it in the background, up to 1 s later:
        # a kill in that second re-served a batch the trainer had already trained on.)
        ev = q.batch_event(uuid7(), b, s.config.serve_mode)
        try:
            await s.record(ev)
        except BaseException:
            q.unpop_batch(b)
            raise
        q.apply(ev)
        raw = b'{"batch":[' + b",".join(g.body for g in b) + b"]}"
    return await json_response_async(request, raw)


@router.get("/latest_example")
async def latest_example(request: Request, s: IngestState = Depends(get_state)):
    return await json_response_async(request, s.queue.latest_example())


@router.get("/status")
async def status(s: IngestState = Depends(get_state)):
    return s.queue.status()


@router.get("/reset_data", dependencies=WRITE)
async def reset_data(s: IngestState = Depends(get_state)):
    async with s.batch_lock:
        async with s.state_lock:
            ev = s.queue.reset_event()
            s.queue.apply(ev)  # first, so no group can slip in between the record and the wipe
            await s.record(ev)
    return PlainTextResponse("Reset successful", status_code=200)

