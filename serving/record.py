"""Every call the server answers, appended to the lake's `trajectories` as trajectory data.

One row per call (rows are immutable), built by the one row builder (transcript/trajectory_row.py): the conversation so
far including the reply (`messages`: the request's through the message model's normaliser, the reply split by its
parser, `reply_message`, as an environment splits an action), `policy_version` = the served version's name, the
call's prompt and completion token ids in `tokens` with Atropos' conventions (trainers/modeling/token_columns.py:
`masks` MASKED on the prompt and the token id on the completion; `inference_logprobs` NOT_SAMPLED on the prompt and
the sampled log-probs on the completion: the log-softmax of the model's raw float32 logits, the number the trainer
computes), and in `metadata` the adapter's sha256, the sampling parameters, the endpoint and the call's place in
its conversation.

Calls of one conversation share a `trajectory_id`: the `X-Lachesis-Session` header names the conversation
(trajectory id = uuid5 of it, so it survives a restart), else a call whose messages start with an earlier call's
messages plus its reply continues that call's trajectory (prefix matching; kept in memory for the last
PREFIX_MEMORY conversations, and read back from the lake's latest recorded calls at start, so a restart keeps
joining them). The first call asked again by the same client (its address and user agent) while its reply left
the turn open (tool calls, or a reply cut at max_tokens: Hermes asks again after an invalid tool call or a cut
reply) is a retry of call 0 in the same trajectory; once a first call was answered in full or its conversation
went on, the same first messages begin a new conversation. Each continued call appends a new row with the same id, and
views/trajectories_current.sql picks the latest row per trajectory: the whole conversation. The id goes back in
the `X-Lachesis-Trajectory` header, so a reward can be posted later to `lake serve`'s /v1/rewards.
All of it within one client identity, the name of the token the client sent (edge/guards.py's require_token; ""
without named tokens): prefix keys are chained from it and a chosen session name is taken within it, so one
client's messages never join another's conversation. The answer's `X-Lachesis-Session` is a value the server
issues (`issue`: the trajectory id and an HMAC of it and the identity under this process's secret, never in the
lake), which continues that conversation for that identity only.

Durability: `--record sync` (default) answers a request only after its row is committed (lake.append: concurrent
calls' rows share one Delta commit through the lake's group commit); `--record async` queues rows (bounded:
`--record-queue`; a full queue makes requests wait) and a background task appends them in batches, so a crash loses
what was queued; `--record off` records nothing.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import uuid
from collections import OrderedDict
from pathlib import Path

from edge.lake_errors import LakeWriteFailed, log_line, store_failure
from lake import Lake
from lake.errors import LAKE_ERRORS
from serving.access_log import log
from trainers.modeling.token_columns import prompt_completion_columns
from transcript.messages import assistant_message, normalize_messages
from transcript.toolcalls import loads_bounded
from transcript.trajectory_row import trajectory_row

SOURCE = "lake serve-model"
SESSION_NS = uuid.UUID("5f1e3c1a-6f0b-4d59-9a62-1c7d0c1e2a77")  # trajectory id = uuid5(SESSION_NS, session)
ISSUED = "ls1."  # a session value this server issued: ISSUED + trajectory id + "." + its MAC for the client
PREFIX_MEMORY = 10_000
ASYNC_BATCH = 256  # rows per background append at most
RECENT_CALLS_SQL = Path(__file__).with_name("recent_calls.sql")


def _prefix_keys(messages: list[dict], identity: str = "") -> list[str]:
    """The identity of each prefix of a conversation (keys[k - 1] is that of messages[:k]) for prefix matching:
    roles, text and tool calls (names and parsed arguments), not ids or reasoning, which clients drop or rewrite when
    they send a conversation back. Chained (each key hashes the previous one and one message), so all prefixes cost
    one pass over the messages: hashing each prefix whole was quadratic (4,000 messages: 3 s). The chain starts
    from the client's identity (its token's name), so the same messages of two clients never share a key."""
    keys, prev = [], hashlib.sha256(b"client\0" + identity.encode()).digest() if identity else b""
    for m in messages:
        calls = [(c.get("name"), _args(c.get("arguments"))) for c in (m.get("tool_calls") or [])]
        canon = json.dumps([m.get("role"), m.get("content") or "", calls], sort_keys=True, ensure_ascii=False)
        prev = hashlib.sha256(prev + b"\0" + canon.encode()).digest()
        keys.append(prev.hex())
    return keys


def _key(messages: list[dict], identity: str = "") -> str:
    return _prefix_keys(messages, identity)[-1] if messages else ""


def is_issued(session: str | None) -> bool:
    """An X-Lachesis-Session value of the form this server issues (Conversations.issue), not a client's own name."""
    return bool(session) and session.startswith(ISSUED)


def _args(a):
    """Arguments as an object where their text is JSON within the parser's bounds (transcript/toolcalls.py), else the
    text: a row read back from the lake is never a RecursionError."""
    if isinstance(a, str):
        try:
            return loads_bounded(a)
        except ValueError:
            return a
    return a


class Conversations:
    """Which trajectory a call belongs to, and how many calls it has had."""

    def __init__(self, limit: int = PREFIX_MEMORY):
        self.limit = limit
        self._ends: OrderedDict[str, tuple[str, int]] = OrderedDict()  # key of messages + reply -> (id, calls)
        self._sessions: dict[str, int] = {}
        # (client, key of a first call's messages) -> its trajectory, while its reply leaves the turn open and the
        # conversation has not gone on; and back, to close it when it does
        self._open_starts: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._start_of: dict[str, tuple[str, str]] = {}
        self._secret = secrets.token_bytes(32)  # signs the sessions this process issues

    def issue(self, tid: str, identity: str = "") -> str:
        """The X-Lachesis-Session value that continues `tid` for this client identity and no other: the trajectory
        id with an HMAC of it and the identity under this process's secret. Not in the lake, so knowing a
        trajectory id (readers of the lake see them all) never lets a client write into it."""
        return f"{ISSUED}{tid}.{self._mac(tid, identity).decode()}"

    def _mac(self, tid: str, identity: str) -> bytes:
        return hmac.new(self._secret, f"{identity}\0{tid}".encode(), hashlib.sha256).hexdigest()[:32].encode()

    def _session(self, session: str, identity: str) -> str | None:
        """The trajectory an X-Lachesis-Session value names for this identity: an issued one's if its MAC holds
        (else None: another client's, or from before a restart, and the call is joined as if it sent none); a name
        the client chose is uuid5 of it within the identity (without tokens, or with one, as before)."""
        if not is_issued(session):
            return str(uuid.uuid5(SESSION_NS, f"{identity}\0{session}" if identity else session))
        tid, _, mac = session[len(ISSUED):].rpartition(".")
        return tid if tid and hmac.compare_digest(mac.encode("utf-8", "replace"), self._mac(tid, identity)) else None

    def join(self, messages: list[dict], session: str | None, client: str = "",
             identity: str = "") -> tuple[str, int]:
        """(trajectory id, index of this call in it) for a call with these messages from `client` (its address
        and user agent) holding the token named `identity`: joined only to that identity's conversations."""
        tid = self._session(session, identity) if session else None
        if tid is not None:
            return tid, self._sessions.get(tid, 0)
        keys = _prefix_keys(messages, identity)
        for k in range(len(messages) - 1, 0, -1):  # the longest earlier conversation this one extends
            if messages[k - 1].get("role") != "assistant":
                continue
            hit = self._ends.get(keys[k - 1])
            if hit is not None:
                return hit
        again = self._open_starts.get((client, keys[-1])) if keys else None
        return (again, 0) if again is not None else (str(uuid.uuid4()), 0)

    def load(self, lake: Lake) -> int:
        """The latest recorded calls (recent_calls.sql), oldest first, as if they had just been answered: a
        conversation continued after a restart joins its trajectory. Returns how many were read."""
        sql = RECENT_CALLS_SQL.read_text()
        with lake.snapshot(for_query=sql) as snap:
            rows = snap.arrow(sql, [self.limit]).to_pylist()
        for r in reversed(rows):
            self.remember(r["messages"], r["trajectory_id"], int(r["call"] or 0), identity=r["client"] or "")
        return len(rows)

    def remember(self, messages_with_reply: list[dict], tid: str, call: int, client: str = "",
                 open_turn: bool = False, identity: str = "") -> None:
        """A call answered: its conversation with the reply is what a next call extends. `open_turn`: the reply
        leaves the turn open (tool calls, which the client runs or rejects, or a reply cut at max_tokens), so the
        same first call asked again by the same client (Hermes after an invalid tool call) is a retry of call 0
        in this trajectory, not a new conversation; a first call answered in full, or any later call, closes it."""
        self._sessions[tid] = call + 1
        key = _key(messages_with_reply, identity)
        self._ends[key] = (tid, call + 1)
        self._ends.move_to_end(key)
        while len(self._ends) > self.limit:
            self._ends.popitem(last=False)
        if len(self._sessions) > self.limit:
            self._sessions.pop(next(iter(self._sessions)))
        self._close_start(tid)
        if call == 0 and open_turn:
            start = (client, _key(messages_with_reply[:-1], identity))
            self._close_start(self._open_starts.get(start))
            self._open_starts[start], self._start_of[tid] = tid, start
            while len(self._open_starts) > self.limit:
                self._start_of.pop(self._open_starts.popitem(last=False)[1], None)

    def _close_start(self, tid: str | None) -> None:
        """The first call of `tid` is no longer open to a retry (answered in full, or the conversation went on)."""
        start = self._start_of.pop(tid, None) if tid is not None else None
        if start is not None:
            self._open_starts.pop(start, None)


def reply_message(text: str, call: int, *, tools: bool) -> dict:
    """The reply's assistant message: with tools offered, split as an environment splits an action (reasoning, tool
    calls with ids `call_{call}_{j}`, the rest as content); without, the text is the content."""
    return assistant_message(text, call) if tools else {"role": "assistant", "content": text}


def recorded_messages(request_messages: list[dict], reply: dict) -> list[dict]:
    """The conversation a call's row records and the next call is matched against: the request's messages and the
    reply in the lake form (a reply to a request without tools that holds markup is split as an importer splits
    it, so the client sending it back continues the same conversation)."""
    return normalize_messages(request_messages + [reply], require_content=False)[0]


def call_record(*, trajectory_id: str, label: str, version: dict, messages: list[dict], prompt_ids: list[int],
                token_ids: list[int], logprobs: list[float], metadata: dict) -> dict:
    """One call as a trajectories record (see the module docstring for the columns)."""
    return trajectory_row(
        trajectory_id=trajectory_id, model=label, policy_version=version["name"], messages=messages,
        **prompt_completion_columns(prompt_ids, token_ids, logprobs),
        metadata={"source": SOURCE, "adapter_sha256": version["sha256"], "adapter_path": version["path"],
                  "version_step": version["step"], "prompt_tokens": len(prompt_ids),
                  "completion_tokens": len(token_ids), **metadata})


class RecordFailed(LakeWriteFailed):
    """--record sync: a call's row could not be committed; the answer is not sent without it (a 503, or an error
    event on a stream: edge/lake_errors.py). The message is for the client: the lake named, its cause in one line,
    no paths."""


class Recorder:
    """Appends call records to the lake: sync (after the commit), async (bounded queue) or off."""

    def __init__(self, lake: Lake | None, mode: str, queue_size: int):
        self.lake = lake
        self.mode = mode if lake is not None else "off"
        self.recorded = 0
        self.failed = 0
        self._queue: asyncio.Queue | None = asyncio.Queue(maxsize=queue_size) if self.mode == "async" else None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._queue is not None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def record(self, rec: dict) -> None:
        """sync: returns once the row is committed (raises if the commit fails); async: once queued."""
        if self.mode == "off":
            return
        if self._queue is not None:
            await self._queue.put(rec)
            return
        try:
            await asyncio.to_thread(self.lake.append, "trajectories", [rec])
        except LAKE_ERRORS as exc:  # deltalake's OSError (a full disk, an immutable log) as the lake's own errors
            self.failed += 1
            log(f"a call could not be recorded in the lake: {log_line(exc)}")
            raise RecordFailed(f"the call could not be recorded in the lake, retry: {store_failure(exc)}") from None
        self.recorded += 1

    async def _drain(self) -> None:
        while True:
            rows = [await self._queue.get()]
            while len(rows) < ASYNC_BATCH and not self._queue.empty():
                rows.append(self._queue.get_nowait())
            try:
                await asyncio.to_thread(self.lake.append, "trajectories", rows)
                self.recorded += len(rows)
            except (RuntimeError, OSError, ValueError) as exc:  # LakeError, RecordError, I/O: counted and said
                self.failed += len(rows)
                log(f"{len(rows)} recorded calls lost: {log_line(exc)}")
            finally:
                for _ in rows:
                    self._queue.task_done()

    async def close(self) -> None:
        """Async mode: append what is queued, then stop."""
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
