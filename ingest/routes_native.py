"""The native /v1 routes: trajectories (native, OpenAI-messages, Hermes or Atropos records), rewards, skills,
health and stats.

Ids follow one rule with `lake import`: a record keeps its `trajectory_id`, else gets one derived from its
content (Atropos groups: content and position), so the same body posted twice, or a file posted and then
imported, is stored once. With an `Idempotency-Key` the ids are derived from the key and the position instead.
"""
from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Request

from edge.errors import BadInput
from ingest.formats import parse_body, to_records
from ingest.batcher import Expected
from ingest.dedupe import Idempotency
from ingest.http import WRITE, body_bytes, expect_trajectories, get_state, idempotency, json_body
from ingest.owners import stamp_client
from ingest.records import validated_batch
from ingest.skills import parse_skill
from ingest.state import IngestState
from ingest.util import canonical, text_hash
from lake.skill_files import valid_name

router = APIRouter()


async def trajectory_items(request: Request, data: bytes = Depends(body_bytes)) -> list:
    """The body as (line, object) pairs: one JSON object, a JSON array, or NDJSON."""
    try:
        return parse_body(data, request.headers.get("content-type"))
    except BadInput as exc:
        if exc.kind == "json_invalid":
            exc.status = 422
            exc.field = ["body"] + ([exc.line] if exc.line else [])
        elif exc.kind == "missing":
            exc.status = 422
        raise


def _records(obj, idem: Idempotency | None, i: int, line: int | None) -> list[dict]:
    """Records of item i of a request (formats.to_records, the one format dispatch). Without an Idempotency-Key:
    the position `lake import` would give the record, its line or its 1-based index in an array; with one: ids
    from the key and the position, and the key in each record's metadata."""
    if idem is None:
        return to_records(obj, "auto", line=line or i + 1)
    recs = to_records(obj, "auto", keyed=(idem.key, i))
    for r in recs:
        if isinstance(r.get("metadata", {}), dict):
            r["metadata"] = {**r.get("metadata", {}), **idem.metadata()}
    return recs


@router.get("/v1/health")
async def health(s: IngestState = Depends(get_state)):
    # no lake path: health answers clients without the token (/v1/stats, behind it, names the lake)
    return {"status": "ok", "uptime_s": round(time.time() - s.started_at, 3)}


@router.get("/v1/stats")
async def stats(s: IngestState = Depends(get_state)):
    versions = await asyncio.to_thread(lambda: {t: s.lake.version(t) for t in s.lake.tables()})
    return {"lake": str(s.lake.root), **s.stats(versions)}


@router.post("/v1/trajectories", dependencies=WRITE)
async def post_trajectories(request: Request, expected: Expected = Depends(expect_trajectories),
                            items: list = Depends(trajectory_items), idem: Idempotency | None = Depends(idempotency),
                            s: IngestState = Depends(get_state)):
    client = request.state.client  # a named token's name goes into each row's metadata.client (ingest.owners)
    records, locs = [], []
    for i, (line, obj) in enumerate(items):
        loc = line if line is not None else i
        try:
            recs = _records(obj, idem, i, line)
            recs = [stamp_client(r, client, []) for r in recs]  # (after the ids: content-derived ids stay the same)
        except BadInput as exc:
            f = exc.field if isinstance(exc.field, list) else ([exc.field] if exc.field else [])
            raise BadInput(exc.reason, field=["body", loc] + f, status=422, kind=exc.kind, line=line) from None
        records.extend(recs)
        locs.extend([loc] * len(recs))
    batch = validated_batch(records, locs=locs)  # all checked before anything is written
    seen, keep, dups, stored = set(), [], 0, None
    async with s.claims() as claims:
        for i, r in enumerate(batch.rows):
            tid = r.payload["trajectory_id"]
            if tid in seen or not await claims.take(tid):
                dups += 1
                stored = stored or (tid if tid not in seen else None)
            else:
                keep.append(i)
            seen.add(tid)
        if idem and stored:  # a retry, or the key reused for another body (409, nothing written)
            await s.same_body("trajectories", idem, "trajectories", stored)
        res = None
        if keep:
            res = await s.commit_arrow("trajectories", batch.arrow(keep), expected=expected)
            if idem and not res.skipped:  # (rows another process committed first carry its body, not ours)
                s.bodies.committed("trajectories", idem)
    accepted = len(keep)
    if res is not None and res.skipped:  # another process committed some of these ids meanwhile
        dropped = s.guards["trajectories"].pop_dropped([batch.rows[i].payload["trajectory_id"] for i in keep])
        if idem and len(dropped) == len(keep):  # none of ours written: the other body wins, ours is a 409
            await s.same_body("trajectories", idem, "trajectories", min(dropped))
        accepted, dups = accepted - len(dropped), dups + len(dropped)
    s.counters.acked_rows += accepted
    s.counters.duplicates += dups
    return {"status": "committed", "accepted": accepted, "duplicates": dups,
            "trajectory_ids": [r["trajectory_id"] for r in records], "version": res.version if res else None}


@router.post("/v1/rewards", dependencies=WRITE)
async def post_rewards(request: Request, obj=Depends(json_body), idem: Idempotency | None = Depends(idempotency),
                       s: IngestState = Depends(get_state)):
    """Rewards for known trajectories. A named client (a `NAME TOKEN` line) may reward only the trajectories it
    posted, unless its line ends with `grader`; its name is recorded in each reward's metadata.client
    (ingest.owners). Everything is checked before anything is written: one refused id refuses the request."""
    client = request.state.client
    items = obj if isinstance(obj, list) else [obj]
    duplicate = {"status": "committed", "accepted": 0, "duplicate": True}
    if idem and f"rewards:{idem.key}" in s.idem_keys:
        await s.same_body("rewards", idem, "rewards")
        return duplicate
    recs, locs, refreshed = [], [], False
    for i, it in enumerate(items):
        idx = i if isinstance(obj, list) else None
        loc = ["body"] + ([] if idx is None else [idx])
        if not isinstance(it, dict):
            raise BadInput("a reward must be a JSON object", field=loc, status=422, kind="model_type")
        tid = it.get("trajectory_id")
        if not isinstance(tid, str) or not tid:
            raise BadInput("Field required", field=loc + ["trajectory_id"], status=422, kind="missing")
        if it.get("reward") is None and it.get("success") is None and it.get("labels") is None:
            raise BadInput("a reward needs at least one of reward, success, labels", field=loc + ["reward"],
                           status=422, kind="missing")
        if tid not in s.ids and not refreshed:  # written since by another process (lake serve-model, lake watch)?
            await asyncio.to_thread(s.guards["trajectories"].refresh)
            refreshed = True
        if tid not in s.ids:
            raise BadInput(f"unknown trajectory_id {tid!r}", field=loc + ["trajectory_id"], status=404,
                           kind="not_found")
        r = stamp_client(dict(it), client, loc)
        if idem:
            meta = r.get("metadata") if isinstance(r.get("metadata"), dict) else {}
            r["metadata"] = {**meta, **idem.metadata()}
        recs.append(r)
        locs.append(idx)
    if not s.config.tokens.may_reward_any(client):
        owners = await asyncio.to_thread(s.owners.of, [r["trajectory_id"] for r in recs])
        for r, idx in zip(recs, locs):
            if owners[r["trajectory_id"]] != client:
                raise BadInput(f"trajectory {r['trajectory_id']!r} was not posted by this client: a client may "
                               "reward only its own trajectories (a token file line ending with `grader` may "
                               "reward any)", field=["body"] + ([] if idx is None else [idx]) + ["trajectory_id"],
                               status=403, kind="forbidden")
    async with s.claims() as claims:  # requests with one key run one at a time: the second is the duplicate
        if idem and not await claims.take(f"rewards:{idem.key}", s.idem_keys):
            await s.same_body("rewards", idem, "rewards")
            return duplicate
        res = await s.commit_records("rewards", recs, locs=locs)
        if idem and not res.skipped:
            s.bodies.committed("rewards", idem)
    if idem and s.guards["rewards"].pop_dropped([f"rewards:{idem.key}"]):  # another process committed it first
        await s.same_body("rewards", idem, "rewards")  # (nothing of ours was written)
        return duplicate
    return {"status": "committed", "accepted": len(recs), "version": res.version}


def _skill_from_content(obj: dict, category: str | None) -> dict:
    """`{"content": SKILL.md text, "name"?, "category"?, "provenance"?}` -> a skills record."""
    name_hint = obj.get("name")
    if name_hint is not None and not valid_name(name_hint):
        raise BadInput(f"skill name {name_hint!r} is not allowed", field=["body", "name"], status=422,
                       kind="bad_name")
    rel = "/".join([p for p in [category, name_hint or "skill"] if p]) + "/SKILL.md"
    try:
        doc = parse_skill(obj["content"].encode("utf-8"), rel)
    except BadInput as exc:
        raise BadInput(exc.describe(), field=["body", "content"] + ([exc.field] if exc.field else []),
                       status=422, kind=exc.kind) from None
    if name_hint is None and doc.name_source == "folder":  # no folder here: "skill" is a placeholder
        raise BadInput("frontmatter has no 'name'", field=["body", "content", "name"], status=422, kind="missing")
    if name_hint is not None and name_hint != doc.name:
        raise BadInput(f"name {name_hint!r} differs from the frontmatter name {doc.name!r}",
                       field=["body", "name"], status=422, kind="value_error")
    prov = obj.get("provenance", "agent")
    if prov not in ("agent", "bundled", "hub"):
        raise BadInput("provenance must be agent, bundled or hub", field=["body", "provenance"], status=422)
    return {"name": doc.name, "category": category or doc.category, "path": rel, "provenance": prov,
            "description": doc.description, "frontmatter": doc.frontmatter, "body": doc.body,
            "deleted": False, "metadata": {"sha256": doc.sha256, "via": "http"}}


def _skill_from_record(obj: dict) -> dict:
    """A native skills record; its sha256 is the hash of the fields that make a version."""
    name = obj.get("name")
    if not valid_name(name):
        raise BadInput(f"skill name {name!r} is missing or not allowed", field=["body", "name"], status=422,
                       kind="bad_name")
    rec = {k: v for k, v in obj.items() if k != "content"}
    meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    rec["metadata"] = {**meta, "sha256": text_hash(canonical(
        {k: obj.get(k) for k in ("body", "frontmatter", "description", "category", "deleted")}))}
    return rec


@router.post("/v1/skills", dependencies=WRITE)
async def post_skills(obj=Depends(json_body), idem: Idempotency | None = Depends(idempotency),
                      s: IngestState = Depends(get_state)):
    if not isinstance(obj, dict):
        raise BadInput("a skill must be a JSON object", field=["body"], status=422, kind="model_type")
    if idem and f"skills:{idem.key}" in s.idem_keys:
        await s.same_body("skills", idem, "skills")
        return {"status": "committed", "duplicate": True}
    category = obj.get("category")
    if category is not None and (not isinstance(category, str)
                                 or not all(valid_name(p) for p in category.split("/"))):
        raise BadInput(f"category {category!r} is not allowed (no path separators or '..')",
                       field=["body", "category"], status=422, kind="bad_name")
    if isinstance(obj.get("content"), str):  # parsed in a worker thread: YAML is pure Python, a SKILL.md up to 1 MiB
        rec = await asyncio.to_thread(_skill_from_content, obj, category)
    else:
        rec = _skill_from_record(obj)
    if idem:
        rec["metadata"].update(idem.metadata())
    h = rec["metadata"]["sha256"]
    async with s.claims() as claims:  # requests with one key, and versions of one skill, one at a time
        if idem and not await claims.take(f"skills:{idem.key}", s.idem_keys):
            await s.same_body("skills", idem, "skills")
            return {"status": "committed", "duplicate": True}
        await claims.take(f"skill-name:{rec['name']}", set())  # never done: it only waits for the other one
        if not rec.get("deleted") and s.skill_hash.get(rec["name"]) == h:
            return {"status": "unchanged", "name": rec["name"]}
        res = await s.commit_records("skills", [rec])
        if idem and not res.skipped:
            s.bodies.committed("skills", idem)
        if idem and s.guards["skills"].pop_dropped([f"skills:{idem.key}"]):  # another process committed it first
            await s.same_body("skills", idem, "skills")  # (nothing of ours was written)
            return {"status": "committed", "duplicate": True}
        if rec.get("deleted"):
            s.skill_hash.pop(rec["name"], None)
        else:
            s.skill_hash[rec["name"]] = h
    return {"status": "committed", "name": rec["name"], "version": res.version}
