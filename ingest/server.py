"""`lake serve`: the durable trajectory API (native /v1 routes + the 13 Atropos run-api routes).

A 2xx means committed: every write goes through a per-table batcher that turns all requests pending at that
moment into one lake submit (the lake group-commits them into one Delta version) and answers each request
only after that commit. Retries are safe: trajectory ids (client-given, or derived from an
`Idempotency-Key`) are checked against an in-memory index loaded from the lake at start.

The Atropos queue is durable: groups are rows of `trajectories` (event_type `atropos.group`); trainer and env
registrations, the started gate, resets and every served batch are `runs` events (kind `atropos.*`). At start
the state is replayed from those events, so groups acknowledged but not yet served are served after a restart.
"""
from __future__ import annotations

import asyncio
import gzip
import hmac
import logging
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError

from ingest import atropos as A
from ingest.errors import BadInput, TooLarge
from ingest.formats import detect_record, native_to_record, parse_body
from ingest.hermes import hermes_to_record
from ingest.skills import parse_skill
from ingest.records import split_field as _split_field
from ingest.records import take_numeric_lists as _take_numeric_lists
from ingest.util import gunzip_bounded, loads, stable_hash, text_hash, uuid7
from lake import Lake, RecordError
from lake.records import validate_records
from lake.schemas import payload_schema
from lake.skill_files import valid_name

log = logging.getLogger("lachesis.ingest.server")

MiB = 1 << 20
SERVE_MODES = ("at-least-once", "at-most-once")


class CommitFailed(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------------------
# batching committer: many requests -> one lake submit -> one Delta version
# --------------------------------------------------------------------------------------------------------
class TableBatcher:
    def __init__(self, writer, table: str, linger: float = 0.0):
        self.writer, self.table = writer, table
        self.linger = linger  # wait this long after the first pending item, to gather more into one commit
        self.schema = payload_schema(table)
        self.pending: list = []
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.commits = 0
        self.rows = 0
        self.timings = deque(maxlen=2000)  # (build_s, commit_s, rows) per lake submit

    async def commit(self, payloads: list[dict], event_types: list[str], occurred: list) -> object:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((payloads, event_types, occurred, fut))
        self.wake.set()
        return await fut

    def _submit(self, items):
        payloads = [p for it in items for p in it[0]]
        ets = [e for it in items for e in it[1]]
        occ = [o for it in items for o in it[2]]
        # column by column: ~10x faster than Table.from_pylist for long token lists
        table = pa.table([pa.array([p.get(f.name) for p in payloads], type=f.type) for f in self.schema],
                         schema=self.schema)
        return self.writer.submit_arrow(self.table, table, event_type=pa.array(ets, pa.string()),
                                        occurred_at=pa.array(occ, pa.timestamp("us", tz="UTC")))

    async def _run(self):
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.linger:
                await asyncio.sleep(self.linger)
            items, self.pending = self.pending, []
            if not items:
                continue
            t0 = time.perf_counter()
            try:
                cf = await asyncio.to_thread(self._submit, items)
            except Exception as exc:  # building the Arrow table failed: isolate the bad request
                if len(items) > 1:
                    for it in items:
                        self.pending.append(it)
                    # retry one by one
                    pend, self.pending = self.pending, []
                    for it in pend:
                        try:
                            cf1 = await asyncio.to_thread(self._submit, [it])
                            asyncio.ensure_future(self._finish(cf1, [it]))
                        except Exception as exc1:
                            if not it[3].done():
                                it[3].set_exception(BadInput(f"record does not fit the lake schema: {exc1}",
                                                             status=422, kind="schema"))
                else:
                    if not items[0][3].done():
                        items[0][3].set_exception(BadInput(f"record does not fit the lake schema: {exc}",
                                                           status=422, kind="schema"))
                continue
            asyncio.ensure_future(self._finish(cf, items, t0, time.perf_counter()))

    async def _finish(self, cf, items, t0=0.0, t1=0.0):
        try:
            res = await asyncio.wrap_future(cf)
            self.timings.append((t1 - t0, time.perf_counter() - t1, sum(len(it[0]) for it in items)))
        except Exception as exc:  # a commit failure is transient for the client: 503, retry
            log.exception("commit to %s failed", self.table)
            for it in items:
                if not it[3].done():
                    it[3].set_exception(CommitFailed(str(exc)))
            return
        self.commits += 1
        self.rows += sum(len(it[0]) for it in items)
        for it in items:
            if not it[3].done():
                it[3].set_result(res)


def _now():
    return datetime.now(timezone.utc)


def _parse_occ(v):
    if v is None:
        return None
    if isinstance(v, datetime):
        return v
    from lake.records import parse_time

    return parse_time(v)


# --------------------------------------------------------------------------------------------------------
# the service: lake, indexes, Atropos state
# --------------------------------------------------------------------------------------------------------
class IngestService:
    def __init__(self, lake: Lake, *, token: str | None = None, max_body: int = 64 * MiB,
                 max_inflated: int = 256 * MiB, writer_name: str = "ingest-http",
                 serve_mode: str = "at-least-once"):
        from lake.lake import process_writer_id

        if serve_mode not in SERVE_MODES:
            raise ValueError(f"serve_mode must be one of {', '.join(SERVE_MODES)}")
        self.serve_mode = serve_mode
        self.pending_serves: set = set()
        self.unconfirmed: list[str] = []  # batches sent whose delivery the trainer has not confirmed yet
        self.lake = lake
        self.token = token
        self.max_body = max_body
        self.max_inflated = max_inflated
        self.writer = lake.writer(process_writer_id(writer_name))
        self.ids: set[str] = set()
        self.inflight: dict[str, asyncio.Future] = {}
        self.idem: dict[str, dict] = {}
        self.skill_hash: dict[str, str] = {}
        self.state = A.AtroposState()
        self.batch_lock = asyncio.Lock()
        self.state_lock = asyncio.Lock()
        self.batchers: dict[str, TableBatcher] = {}
        self.served_batches = 0
        self.counters = {"requests": 0, "acked_rows": 0, "duplicates": 0, "rejected": 0, "commit_failures": 0}
        self.latencies = deque(maxlen=5000)
        self.started_at = time.time()

    # -- start-up --------------------------------------------------------------------------------------
    def load(self) -> None:
        snap = self.lake.snapshot()
        try:
            col = snap.arrow("SELECT trajectory_id FROM trajectories").column(0).to_pylist()
            self.ids = set(col)
            for table in ("rewards", "skills", "runs"):
                rows = snap.arrow(f"SELECT json_extract_string(metadata, '$.idempotency_key') AS k FROM {table} "
                                  "WHERE metadata IS NOT NULL AND json_extract_string(metadata, "
                                  "'$.idempotency_key') IS NOT NULL").column(0).to_pylist()
                for k in rows:
                    self.idem[f"{table}:{k}"] = {"status": "duplicate"}
            rows = snap.arrow("SELECT name, json_extract_string(metadata, '$.sha256') AS h, deleted FROM skills "
                              "ORDER BY occurred_at, event_id").to_pylist()  # as views/skills_current.sql
            for r in rows:
                if r["deleted"]:
                    self.skill_hash.pop(r["name"], None)
                elif r["h"]:
                    self.skill_hash[r["name"]] = r["h"]
            self._restore_atropos(snap)
        finally:
            snap.close()

    def _restore_atropos(self, snap) -> None:
        events = snap.arrow("SELECT kind, config, metadata FROM runs WHERE kind LIKE 'atropos.%' "
                            "ORDER BY ingested_at, event_id").to_pylist()
        st = A.AtroposState()
        excluded: set[str] = set()
        served = 0
        sent: dict[str, list] = {}  # at-least-once batches: batch_id -> group ids
        confirmed: set[str] = set()
        for ev in events:
            kind = ev["kind"]
            cfg = orjson.loads(ev["config"]) if ev["config"] else {}
            meta = orjson.loads(ev["metadata"]) if ev["metadata"] else {}
            if kind == "atropos.register":
                if not st.registered:
                    st.register(A.Registration(**cfg))
                    served = 0
            elif kind == "atropos.env":
                env = dict(cfg)
                env["registered_id"] = len(st.envs)
                st.envs.append(env)
            elif kind == "atropos.env_disconnect":
                st.disconnect_env(int(meta.get("env_id", -1)))
            elif kind == "atropos.started":
                st.started = True
            elif kind == "atropos.reset":
                excluded.update(meta.get("group_ids", []))
                for gids in sent.values():  # a reset ends the run: whatever was sent is settled
                    excluded.update(gids)
                sent.clear()
                st.reset()
            elif kind == "atropos.batch":
                confirmed.update(meta.get("confirms") or [])
                if meta.get("mode") == "at-least-once" and meta.get("batch_id"):
                    sent[meta["batch_id"]] = meta.get("group_ids", [])
                else:
                    excluded.update(meta.get("group_ids", []))
                    served += 1
            elif kind == "atropos.confirm":
                confirmed.update(meta.get("confirms") or [])
        for bid, gids in sent.items():
            if bid in confirmed:
                excluded.update(gids)
                served += 1
            # else: sent but never confirmed (the trainer did not come back before the crash): served again
        if st.registered:
            st.step += served
        con = snap.con
        con.register("__excluded", pa.table({"group_id": pa.array(sorted(excluded), pa.string())}))
        rows = con.sql(
            "SELECT trajectory_id, group_id, tokens, masks, inference_logprobs, advantages, overrides, messages, "
            "reward, raw, json_extract_string(metadata, '$.atropos.qseq') AS qseq FROM trajectories "
            "WHERE event_type = 'atropos.group' AND group_id NOT IN (SELECT group_id FROM __excluded)"
        ).to_arrow_table().to_pylist()
        groups: dict[str, list] = {}
        for r in rows:
            groups.setdefault(r["group_id"], []).append(r)
        ordered = sorted(groups.items(), key=lambda kv: (kv[1][0]["qseq"] or "", kv[0]))
        for gid, grows in ordered:
            d = A.rows_to_group(grows)
            st.add_group(A.QGroup(gid, len(d["tokens"]), d["env_id"], orjson.dumps(d), grows[0]["qseq"] or ""))
        self.state = st
        self.served_batches = served
        if ordered:
            log.info("restored %d unserved Atropos groups", len(ordered))

    def background(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self.pending_serves.add(t)
        t.add_done_callback(self.pending_serves.discard)

    def batcher(self, table: str) -> TableBatcher:
        b = self.batchers.get(table)
        if b is None:
            if table == "runs-lazy":  # background bookkeeping (served batches, confirmations): few commits
                b = TableBatcher(self.writer, "runs", linger=0.25)
            else:
                b = TableBatcher(self.writer, table)
            self.batchers[table] = b
        return b

    async def commit_rows(self, table: str, payloads, event_types, occurred):
        try:
            return await self.batcher(table).commit(payloads, event_types, occurred)
        except CommitFailed:
            self.counters["commit_failures"] += 1
            raise

    async def commit_records(self, table: str, records: list[dict], *, index_base=None, lazy: bool = False):
        """Validate native records with the lake's checker (RecordError -> 422) and commit them."""
        try:
            rows = validate_records(table, records)
        except RecordError as exc:
            loc = ["body"]
            if index_base is not None:
                loc.append(index_base[exc.index] if isinstance(index_base, list) else exc.index)
            loc.extend(_split_field(exc.field))
            raise BadInput(exc.message, field=loc, status=422, kind="schema") from None
        return await self.commit_rows(table + ("-lazy" if lazy else ""), [r.payload for r in rows],
                                      [r.event_type for r in rows], [r.occurred_at for r in rows])

    async def run_event(self, kind: str, *, config=None, metadata=None, status=None, lazy: bool = False):
        rec = {"run_id": f"{kind}-{uuid7()}", "kind": kind, "status": status, "config": config, "metadata": metadata}
        return await self.commit_records("runs", [rec], lazy=lazy)

    # -- dedupe ----------------------------------------------------------------------------------------
    async def claim(self, key: str):
        """-> None when `key` is new (caller must release), or 'dup' once the earlier writer committed."""
        while True:
            if key in self.ids:
                return "dup"
            fut = self.inflight.get(key)
            if fut is None:
                self.inflight[key] = asyncio.get_running_loop().create_future()
                return None
            try:
                await asyncio.shield(fut)
            except Exception:
                pass

    def release(self, keys, ok: bool):
        for k in keys:
            fut = self.inflight.pop(k, None)
            if ok:
                self.ids.add(k)
            if fut is not None and not fut.done():
                fut.set_result(ok)


# --------------------------------------------------------------------------------------------------------
# HTTP helpers
# --------------------------------------------------------------------------------------------------------
def _group_rows_and_body(sd, extra, gid, env_name, loc):
    """Rows for the lake + the served JSON; numbers that JSON/Arrow cannot hold are a 422, not a 500."""
    try:
        body = orjson.dumps(A.served_dict(sd))
        rows = A.group_to_rows(sd, extra, group_id=gid, env_name=env_name, qseq=uuid7())
    except (TypeError, OverflowError, ValueError) as exc:  # e.g. an integer beyond 64 bits
        raise BadInput(f"value out of range: {exc}", field=loc, status=422, kind="value_error") from None
    for key, lo, hi in (("tokens", -(1 << 63), (1 << 63) - 1), ("masks", -(1 << 63), (1 << 63) - 1)):
        for i, seq in enumerate(getattr(sd, key)):
            if seq and (max(seq) > hi or min(seq) < lo):
                raise BadInput("integer out of the 64-bit range", field=loc + [key, i], status=422,
                               kind="value_error")
    return rows, body


def _timing(ts) -> dict:
    if not ts:
        return {}
    ts = list(ts)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"build_ms_p50": round(med([t[0] for t in ts]) * 1000, 1),
            "commit_ms_p50": round(med([t[1] for t in ts]) * 1000, 1),
            "rows_per_submit_p50": med([t[2] for t in ts])}


def _json(request: Request | None, obj=None, *, status: int = 200, raw: bytes | None = None) -> Response:
    body = raw if raw is not None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    headers = {}
    if request is not None and len(body) >= 1000 and "gzip" in request.headers.get("accept-encoding", "").lower():
        body = gzip.compress(body, compresslevel=1)
        headers["Content-Encoding"] = "gzip"
        headers["Vary"] = "Accept-Encoding"
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _json_async(request: Request, raw: bytes) -> Response:
    """Like _json for big bodies: gzip (which releases the GIL) runs in a worker thread."""
    if len(raw) >= 64 * 1024 and "gzip" in request.headers.get("accept-encoding", "").lower():
        body = await asyncio.to_thread(gzip.compress, raw, 1)
        return Response(body, media_type="application/json",
                        headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return _json(request, raw=raw)


def _bigjson(obj) -> bytes:
    """JSON with ints beyond 64 bits (the /register uuid) written as plain numbers."""
    import json

    return json.dumps(obj).encode()


def _error(exc: BadInput) -> Response:
    if exc.status == 422:
        d = exc.to_detail()
        if not d["loc"] or d["loc"][0] != "body":
            d["loc"] = ["body"] + d["loc"]
        return JSONResponse({"detail": [d]}, status_code=422)
    if exc.kind == "bad_gzip":
        return PlainTextResponse("Invalid gzip payload", status_code=400)
    body = {"detail": exc.describe(), "type": exc.kind}
    if exc.line is not None:
        body["line"] = exc.line
    if exc.field is not None:
        body["field"] = exc.field_str()
    return JSONResponse(body, status_code=exc.status)


async def read_body(request: Request, svc: IngestService) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise BadInput("bad Content-Length header") from None
        if n > svc.max_body:
            raise TooLarge(f"body of {n} bytes is over the limit of {svc.max_body} bytes")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > svc.max_body:
            raise TooLarge(f"body is over the limit of {svc.max_body} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    enc = request.headers.get("content-encoding", "").lower()
    if "gzip" in enc:
        data = gunzip_bounded(data, svc.max_inflated)
    elif enc and enc not in ("identity",):
        raise BadInput(f"unsupported Content-Encoding {enc!r} (gzip or identity)", status=415, kind="encoding")
    return data


async def read_json(request: Request, svc: IngestService):
    return _parse_json_body(await read_body(request, svc))


def _parse_json_body(data: bytes):
    """A request body as JSON; an empty or malformed body is a 422 that says what is wrong (and where)."""
    if not data.strip():
        raise BadInput("Field required", field=["body"], status=422, kind="missing")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = f"JSON decode error: {exc}"
        if "utf-8" in str(exc).lower():
            msg = f"body is not valid UTF-8: {exc}"
        raise BadInput(msg, field=["body", getattr(exc, "pos", 0)], status=422, kind="json_invalid") from None


def _validate(model, obj):
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise _Detail(A.validation_detail(exc)) from None


class _Detail(Exception):
    def __init__(self, detail):
        self.detail = detail


# --------------------------------------------------------------------------------------------------------
# the app
# --------------------------------------------------------------------------------------------------------
def create_app(lake_root: str | Path, *, token: str | None = None, max_body: int = 64 * MiB,
               max_inflated: int = 256 * MiB, serve_mode: str = "at-least-once") -> FastAPI:
    from contextlib import asynccontextmanager

    holder: dict = {}

    @asynccontextmanager
    async def lifespan(app):
        lake = Lake.init(lake_root)
        svc = IngestService(lake, token=token, max_body=max_body, max_inflated=max_inflated, serve_mode=serve_mode)
        await asyncio.to_thread(svc.load)
        holder["svc"] = svc
        app.state.svc = svc
        yield

    app = FastAPI(title="Lachesis ingest (Atropos-compatible)", lifespan=lifespan)

    def svc() -> IngestService:
        return holder["svc"]

    WRITE_GET = {"/batch", "/reset_data"}

    @app.middleware("http")
    async def guard(request: Request, call_next):
        s = holder.get("svc")
        t0 = time.perf_counter()
        if s is not None:
            s.counters["requests"] += 1
            if s.token and (request.method == "POST" or request.url.path in WRITE_GET):
                auth = request.headers.get("authorization", "")
                if not hmac.compare_digest(auth.encode(), f"Bearer {s.token}".encode()):
                    return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})
        try:
            resp = await call_next(request)
        except BadInput as exc:
            if s:
                s.counters["rejected"] += 1
            return _error(exc)
        if s is not None and request.method == "POST":
            s.latencies.append(time.perf_counter() - t0)
        return resp

    def wrap(fn):
        import functools

        @functools.wraps(fn)
        async def inner(request: Request):
            try:
                return await fn(request)
            except BadInput as exc:
                svc().counters["rejected"] += 1
                return _error(exc)
            except _Detail as d:
                svc().counters["rejected"] += 1
                return JSONResponse({"detail": d.detail}, status_code=422)
            except CommitFailed as exc:
                return JSONResponse({"detail": f"lake commit failed, retry: {exc}"}, status_code=503)
        return inner

    # ---------------------------------------------------------------- Atropos routes
    @app.get("/")
    async def root():
        return {"message": "AtroposLib API"}

    @app.post("/register")
    @wrap
    async def register(request: Request):
        s = svc()
        reg = _validate(A.Registration, await read_json(request, s))
        async with s.state_lock:
            if not s.state.registered:
                await s.run_event("atropos.register", config=reg.model_dump())
                s.state.register(reg)
                s.served_batches = 0
        import uuid

        u = uuid.uuid4().int
        s.state.requesters.append(u)
        return Response(_bigjson({"uuid": u}), media_type="application/json")

    @app.get("/info")
    async def info():
        st = svc().state
        if not st.registered:
            return {"batch_size": -1, "max_token_len": -1}
        return {"batch_size": st.batch_size, "max_token_len": st.max_token_len}

    @app.get("/wandb_info")
    async def wandb_info():
        st = svc().state
        return {"group": st.group, "project": st.project}

    @app.post("/register-env")
    @wrap
    async def register_env(request: Request):
        s = svc()
        re_ = _validate(A.RegisterEnv, await read_json(request, s))
        if re_.min_batch_allocation is not None and not 0.0 <= re_.min_batch_allocation <= 1.0:
            raise BadInput("min_batch_allocation must be between 0 and 1", field=["body", "min_batch_allocation"],
                           status=422, kind="value_error")
        async with s.state_lock:
            if not s.state.started:
                return {"status": "wait for trainer to start"}
            cfg = re_.model_dump()
            env = {"max_context_len": re_.max_token_length, "weight": re_.weight if re_.weight is not None else 1.0,
                   "desired_name": re_.desired_name, "connected": True,
                   "min_batch_allocation": re_.min_batch_allocation, "group_size": re_.group_size}
            k = len([x for x in s.state.envs if x["desired_name"] == re_.desired_name])
            env["real_name"] = f"{re_.desired_name}_{k}"
            await s.run_event("atropos.env", config=env, metadata={"request": cfg})
            return s.state.register_env(re_)

    @app.post("/disconnect-env")
    @wrap
    async def disconnect_env(request: Request):
        s = svc()
        ident = _validate(A.EnvIdentifier, await read_json(request, s))
        async with s.state_lock:
            res = s.state.disconnect_env(ident.env_id)
            if res["status"] == "success":
                await s.run_event("atropos.env_disconnect", metadata={"env_id": ident.env_id})
            return res

    @app.get("/status-env")
    @wrap
    async def status_env(request: Request):
        s = svc()
        env_id = request.query_params.get("env_id")
        if env_id is None:
            obj = await read_json(request, s)
            ident = _validate(A.EnvIdentifier, obj)
        else:
            ident = _validate(A.EnvIdentifier, {"env_id": env_id})
        try:
            return s.state.status_env(ident.env_id)
        except IndexError:
            return JSONResponse({"detail": f"unknown env_id {ident.env_id}"}, status_code=404)

    def _raise_json(data: bytes):
        """pydantic said the body is not JSON: raise the same 422 as read_json would."""
        _parse_json_body(data)
        raise BadInput("JSON decode error", field=["body"], status=422, kind="json_invalid")  # orjson took it

    async def _ingest_group(request: Request, s: IngestService, sd, key: str | None):
        obj = sd.model_extra or {}
        if not sd.tokens:
            raise BadInput("a group needs at least one sequence", field=["body", "tokens"], status=422,
                           kind="too_short")
        gid = ("idem-" + text_hash(key)) if key else uuid7()
        first = f"{gid}:0"
        if key:
            claimed = await s.claim(first)
            if claimed == "dup":
                s.counters["duplicates"] += 1
                return {"status": "received", "duplicate": True}
        try:
            rows, body = _group_rows_and_body(sd, obj, gid, s.state.env_name(sd.env_id), ["body"])
        except BadInput:
            if key:
                s.release([first], False)
            raise
        ok = False
        try:
            now = _now()
            await s.commit_rows("trajectories", rows, ["atropos.group"] * len(rows), [now] * len(rows))
            ok = True
        finally:
            if key:
                s.release([first], ok)
        for r in rows:
            s.ids.add(r["trajectory_id"])
        s.counters["acked_rows"] += len(rows)
        return s.state.add_group(A.QGroup(gid, len(sd.tokens), sd.env_id, body))

    @app.post("/scored_data")
    @wrap
    async def scored_data(request: Request):
        s = svc()
        data = await read_body(request, s)
        try:  # parse + validate in one pass (pydantic-core), the hot path of an env
            sd = A.ScoredDataX.model_validate_json(data)
        except ValidationError as exc:
            if any(e["type"] == "json_invalid" for e in exc.errors()) or not data.strip():
                _raise_json(data)
            raise _Detail(A.validation_detail(exc)) from None
        return await _ingest_group(request, s, sd, request.headers.get("idempotency-key"))

    @app.post("/scored_data_list")
    @wrap
    async def scored_data_list(request: Request):
        s = svc()
        obj = await read_json(request, s)
        if not isinstance(obj, list):
            raise _Detail([{"type": "list_type", "loc": ["body"], "msg": "Input should be a valid list",
                            "input": None}])
        errs = []
        sds = []
        for i, g in enumerate(obj):
            try:
                sds.append(A.ScoredData.model_validate(g))
            except ValidationError as exc:
                errs.extend(A.validation_detail(exc, prefix=("body", i)))
        if errs:
            raise _Detail(errs)
        key = request.headers.get("idempotency-key")
        # all groups of one request commit together (one lake submit), then enter the queue in order
        gids, rows_all, bodies = [], [], []
        dups = 0
        for i, (g, sd) in enumerate(zip(obj, sds)):
            if not sd.tokens:
                raise BadInput("a group needs at least one sequence", field=["body", i, "tokens"], status=422)
        claimed_keys = []
        try:
            for i, (g, sd) in enumerate(zip(obj, sds)):
                gid = ("idem-" + text_hash(f"{key}#{i}")) if key else uuid7()
                if key:
                    if await s.claim(f"{gid}:0") == "dup":
                        dups += 1
                        continue
                    claimed_keys.append(f"{gid}:0")
                rows, body = _group_rows_and_body(sd, g, gid, s.state.env_name(sd.env_id), ["body", i])
                rows_all.extend(rows)
                gids.append((gid, sd))
                bodies.append(body)
            ok = False
            if rows_all:
                now = _now()
                await s.commit_rows("trajectories", rows_all, ["atropos.group"] * len(rows_all),
                                    [now] * len(rows_all))
            ok = True
        finally:
            s.release(claimed_keys, ok if claimed_keys else False)
        for r in rows_all:
            s.ids.add(r["trajectory_id"])
        s.counters["acked_rows"] += len(rows_all)
        s.counters["duplicates"] += dups
        buffered, last = 0, None
        for (gid, sd), body in zip(gids, bodies):
            res = s.state.add_group(A.QGroup(gid, len(sd.tokens), sd.env_id, body))
            if res["status"] == "buffered":
                buffered += 1
                last = res["buffer_size"]
        out = {"status": "received", "groups_processed": len(obj)}
        if buffered:
            out["buffered"] = buffered
            if last is not None:
                out["last_buffer_size"] = last
        return out

    @app.get("/batch")
    @wrap
    async def batch(request: Request):
        s = svc()
        async with s.batch_lock:
            st = s.state
            if not st.registered:
                return {"status": "error", "message": "Trainer not registered. Call /register first.", "batch": []}
            if not st.started:
                await s.run_event("atropos.started")
                st.started = True
            # the trainer pulls one batch at a time: coming back confirms the batches it was sent before
            confirms, s.unconfirmed = s.unconfirmed, []
            b = st.pop_batch()
            if b is None:
                if confirms:
                    s.background(s.run_event("atropos.confirm", metadata={"confirms": confirms}, lazy=True))
                return {"batch": None}
            bid = uuid7()
            meta = {"batch_id": bid, "group_ids": [g.group_id for g in b], "sequences": sum(g.size for g in b),
                    "step": st.step, "confirms": confirms, "mode": s.serve_mode}
            if s.serve_mode == "at-least-once":
                # recorded in the background (coalesced with other records into one commit) and confirmed by the
                # trainer's next /batch; a batch sent but not confirmed when the server dies is served again
                s.unconfirmed.append(bid)
                s.background(s.run_event("atropos.batch", status="served", metadata=meta, lazy=True))
            else:
                try:  # at-most-once: committed before the batch leaves; a batch lost in flight is not re-sent
                    await s.run_event("atropos.batch", status="served", metadata=meta)
                except BaseException:
                    st.unpop_batch(b)
                    raise
            s.served_batches += 1
            raw = b'{"batch":[' + b",".join(g.body for g in b) + b"]}"
        return await _json_async(request, raw)

    @app.get("/latest_example")
    async def latest_example(request: Request):
        return await _json_async(request, svc().state.latest_example())

    @app.get("/status")
    async def status():
        return svc().state.status()

    @app.get("/reset_data")
    @wrap
    async def reset_data(request: Request):
        s = svc()
        async with s.batch_lock:
            if s.pending_serves:  # served-batch records land before the reset, so replay sees them first
                await asyncio.gather(*list(s.pending_serves), return_exceptions=True)
            async with s.state_lock:
                st = s.state
                dropped = [g.group_id for g in st.queue] + [g.group_id for b in st.curr_batch for g in b] + \
                    [g.group_id for buf in st.buffer.values() for g in buf]
                st.reset()  # first, so no group can slip in between the record and the wipe
                s.served_batches = 0
                s.unconfirmed = []
                await s.run_event("atropos.reset", metadata={"group_ids": dropped})
        return PlainTextResponse("Reset successful", status_code=200)

    # ---------------------------------------------------------------- native routes
    @app.get("/v1/health")
    async def health():
        s = svc()
        return {"status": "ok", "lake": str(s.lake.root), "uptime_s": round(time.time() - s.started_at, 3)}

    @app.get("/v1/stats")
    async def stats():
        s = svc()
        lat = sorted(s.latencies)

        def pct(p):
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else None

        versions = await asyncio.to_thread(lambda: {t: s.lake.version(t) for t in s.lake.tables()})
        return {**s.counters, "trajectory_ids": len(s.ids), "queue_groups": len(s.state.queue),
                "buffered_groups": sum(len(v) for v in s.state.buffer.values()),
                "served_batches": s.served_batches, "step": s.state.step,
                "commits": {t: b.commits for t, b in s.batchers.items()},
                "commit_timing": {t: _timing(b.timings) for t, b in s.batchers.items()},
                "ack_ms": {"p50": pct(0.5), "p99": pct(0.99)}, "versions": versions}

    @app.post("/v1/trajectories")
    @wrap
    async def post_trajectories(request: Request):
        s = svc()
        data = await read_body(request, s)
        try:
            items = parse_body(data, request.headers.get("content-type"))
        except BadInput as exc:
            if exc.kind == "json_invalid":
                exc.status = 422
                exc.field = ["body"] + ([exc.line] if exc.line else [])
            elif exc.status == 400:
                exc.status = 422 if exc.kind == "missing" else 400
            raise
        key = request.headers.get("idempotency-key")
        records, locs = [], []
        for i, (line, obj) in enumerate(items):
            loc = line if line is not None else i
            try:
                fmt = detect_record(obj)
                if fmt == "hermes":
                    recs = [hermes_to_record(obj)]
                elif fmt == "atropos":
                    from ingest.formats import atropos_to_records

                    gid = ("idem-" + text_hash(f"{key}#{i}")) if key else None
                    recs = atropos_to_records(obj, group_id=gid)[1]
                else:
                    if key and isinstance(obj, dict) and obj.get("trajectory_id") is None:
                        obj = {**obj, "trajectory_id": f"idem-{text_hash(key)}:{i}"}
                    elif isinstance(obj, dict) and obj.get("trajectory_id") is None:
                        obj = {**obj, "trajectory_id": uuid7()}
                    recs = [native_to_record(obj)]
            except BadInput as exc:
                f = exc.field if isinstance(exc.field, list) else ([exc.field] if exc.field else [])
                raise BadInput(exc.reason, field=["body", loc] + f, status=422, kind=exc.kind,
                               line=line) from None
            for r in recs:
                if key:
                    r.setdefault("metadata", {})
                    if isinstance(r["metadata"], dict):
                        r["metadata"] = {**r["metadata"], "idempotency_key": key}
                records.append(r)
                locs.append(loc)
        # validate all before anything is written (long numeric lists by Arrow, the rest by the lake's checker)
        heavy = []
        for r, loc in zip(records, locs):
            heavy.append(_take_numeric_lists(r, loc))
        try:
            rows = validate_records("trajectories", records)
        except RecordError as exc:
            raise BadInput(exc.message, field=["body", locs[exc.index]] + _split_field(exc.field), status=422,
                           kind="schema") from None
        for row, h in zip(rows, heavy):
            row.payload.update(h)
        seen, keep, claimed, dup_ids = set(), [], [], []
        for r, row in zip(records, rows):
            tid = r["trajectory_id"]
            if tid in seen:
                dup_ids.append(tid)
                continue
            seen.add(tid)
            if await s.claim(tid) == "dup":
                dup_ids.append(tid)
                continue
            claimed.append(tid)
            keep.append(row)
        ok = False
        res = None
        try:
            if keep:
                res = await s.commit_rows("trajectories", [r.payload for r in keep], [r.event_type for r in keep],
                                          [r.occurred_at for r in keep])
            ok = True
        finally:
            s.release(claimed, ok)
        s.counters["acked_rows"] += len(keep)
        s.counters["duplicates"] += len(dup_ids)
        return {"status": "committed", "accepted": len(keep), "duplicates": len(dup_ids),
                "trajectory_ids": [r["trajectory_id"] for r in records],
                "version": getattr(res, "version", None)}

    @app.post("/v1/rewards")
    @wrap
    async def post_rewards(request: Request):
        s = svc()
        obj = await read_json(request, s)
        items = obj if isinstance(obj, list) else [obj]
        key = request.headers.get("idempotency-key")
        if key and f"rewards:{key}" in s.idem:
            return {"status": "committed", "accepted": 0, "duplicate": True}
        recs = []
        for i, it in enumerate(items):
            loc = ["body", i] if isinstance(obj, list) else ["body"]
            if not isinstance(it, dict):
                raise BadInput("a reward must be a JSON object", field=loc, status=422, kind="model_type")
            tid = it.get("trajectory_id")
            if not isinstance(tid, str) or not tid:
                raise BadInput("Field required", field=loc + ["trajectory_id"], status=422, kind="missing")
            if it.get("reward") is None and it.get("success") is None and it.get("labels") is None:
                raise BadInput("a reward needs at least one of reward, success, labels", field=loc + ["reward"],
                               status=422, kind="missing")
            if tid not in s.ids:
                raise BadInput(f"unknown trajectory_id {tid!r}", field=loc + ["trajectory_id"], status=404,
                               kind="not_found")
            r = dict(it)
            if key:
                meta = r.get("metadata") if isinstance(r.get("metadata"), dict) else {}
                r["metadata"] = {**meta, "idempotency_key": key}
            recs.append(r)
        try:
            rows = validate_records("rewards", recs)
        except RecordError as exc:
            loc = ["body", exc.index] if isinstance(obj, list) else ["body"]
            raise BadInput(exc.message, field=loc + _split_field(exc.field), status=422, kind="schema") from None
        res = await s.commit_rows("rewards", [r.payload for r in rows], [r.event_type for r in rows],
                                  [r.occurred_at for r in rows])
        if key:
            s.idem[f"rewards:{key}"] = {"status": "committed"}
        return {"status": "committed", "accepted": len(rows), "version": res.version}

    @app.post("/v1/skills")
    @wrap
    async def post_skills(request: Request):
        s = svc()
        obj = await read_json(request, s)
        if not isinstance(obj, dict):
            raise BadInput("a skill must be a JSON object", field=["body"], status=422, kind="model_type")
        key = request.headers.get("idempotency-key")
        if key and f"skills:{key}" in s.idem:
            return {"status": "committed", "duplicate": True}
        category = obj.get("category")
        if category is not None and (not isinstance(category, str) or not all(valid_name(p) for p in category.split("/"))):
            raise BadInput(f"category {category!r} is not allowed (no path separators or '..')",
                           field=["body", "category"], status=422, kind="bad_name")
        if isinstance(obj.get("content"), str):
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
                raise BadInput("frontmatter has no 'name'", field=["body", "content", "name"], status=422,
                               kind="missing")
            if name_hint is not None and name_hint != doc.name:
                raise BadInput(f"name {name_hint!r} differs from the frontmatter name {doc.name!r}",
                               field=["body", "name"], status=422, kind="value_error")
            prov = obj.get("provenance", "agent")
            if prov not in ("agent", "bundled", "hub"):
                raise BadInput("provenance must be agent, bundled or hub", field=["body", "provenance"], status=422)
            rec = {"name": doc.name, "category": category or doc.category, "path": rel, "provenance": prov,
                   "description": doc.description, "frontmatter": doc.frontmatter, "body": doc.body,
                   "deleted": False, "metadata": {"sha256": doc.sha256, "via": "http"}}
        else:
            name = obj.get("name")
            if not valid_name(name):
                raise BadInput(f"skill name {name!r} is missing or not allowed", field=["body", "name"], status=422,
                               kind="bad_name")
            rec = {k: v for k, v in obj.items() if k != "content"}
            meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
            rec["metadata"] = {**meta, "sha256": text_hash(orjson.dumps(
                {k: obj.get(k) for k in ("body", "frontmatter", "description", "category", "deleted")},
                option=orjson.OPT_SORT_KEYS))}
        if key:
            rec["metadata"]["idempotency_key"] = key
        h = rec["metadata"]["sha256"]
        if not rec.get("deleted") and s.skill_hash.get(rec["name"]) == h:
            return {"status": "unchanged", "name": rec["name"]}
        res = await s.commit_records("skills", [rec])
        if rec.get("deleted"):
            s.skill_hash.pop(rec["name"], None)
        else:
            s.skill_hash[rec["name"]] = h
        if key:
            s.idem[f"skills:{key}"] = {"status": "committed"}
        return {"status": "committed", "name": rec["name"], "version": res.version}

    return app


def bind_socket(host: str, port: int, retry_s: float = 0.0):
    """A listening socket on host:port; with retry_s > 0 keep trying while the port is taken (a standby that
    takes over the moment the previous server dies: connections then wait in the backlog, not refused)."""
    import socket

    deadline = time.monotonic() + retry_s
    while True:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def serve(lake_root, host="127.0.0.1", port=8000, token=None, max_body=64 * MiB, max_inflated=256 * MiB,
          log_level="warning", serve_mode="at-least-once", bind_retry_s: float = 0.0):
    import uvicorn

    sock = bind_socket(host, port, bind_retry_s)  # bound before the lake is loaded: nothing committed is missed
    app = create_app(lake_root, token=token, max_body=max_body, max_inflated=max_inflated, serve_mode=serve_mode)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
