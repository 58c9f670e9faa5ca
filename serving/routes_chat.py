"""POST /v1/chat/completions and /v1/completions: render, generate (batched by the engine), answer, record.

A chat request's messages and tools go through the model's own chat template (trainers/modeling/chat.py: Hermes tool
signatures in the system turn), the reply comes back through the project's one tool-call parser
(transcript/toolcalls.py, via the message model's assistant_message in record.reply_message: `<think>` to reasoning, each
parsed `<tool_call>` to a tool call), so what the server returns and records is what the environments and
hermes_eval read. A reply with tool calls ends with finish_reason "tool_calls".

Streaming (`stream: true`): OpenAI's chunks as server-sent events, one per decoded piece of text as tokens are
chosen, ending with `data: [DONE]`. With tools, text from a `<tool_call>` on is held back and sent as `tool_calls`
deltas once the reply is complete (parsed whole, as without streaming). The call is recorded before the last chunk.
"""
from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from jinja2 import TemplateError

from trainers.modeling.chat import prompt_ids
from trainers.generation.generate import Generation

from . import protocol as P
from .access_log import note_tokens
from .http import ServingState, get_serving, guard, json_request
from .record import RecordFailed, call_record, is_issued, recorded_messages, reply_message
from .versions import GenerationFailed, Version, VersionGone

router = APIRouter(dependencies=[Depends(guard)])
SESSION_HEADER = "x-lachesis-session"
TRAJECTORY_HEADER = "X-Lachesis-Trajectory"
VERSION_HEADER = "X-Lachesis-Version"
TOOL_OPEN = "<tool_call>"
CHARS_PER_TOKEN = 64  # more than any token of a byte-level BPE vocabulary covers: a bound, not an estimate


def client_of(request: Request) -> str:
    """Who asks, for joining a retried first call to its conversation: the peer's address and its user agent."""
    return f"{request.client.host if request.client else ''} {request.headers.get('user-agent', '')}"


def _budget(st: ServingState, prompt: int, asked: int | None) -> int:
    """max_new_tokens of a request: what it asked (within --max-tokens and the context), else the default."""
    cfg, ctx = st.config, st.engine.context
    if asked is not None and asked > cfg.max_tokens:
        raise P.ApiError(400, f"max_tokens {asked} is above this server's limit of {cfg.max_tokens} "
                              "(lake serve-model --max-tokens)", param="max_tokens")
    room = ctx - prompt
    if room < 1 or (asked is not None and asked > room):
        raise P.ApiError(400, f"the prompt is {prompt} tokens and max_tokens {asked or 1}: more than this model's "
                              f"context of {ctx} tokens", param="messages", code="context_length_exceeded")
    return asked or min(cfg.default_max_tokens, room)


def _headers(tid: str | None, v: Version, session: str | None = None) -> dict:
    """The version, the trajectory id where the call is recorded (a reward can be posted for it) and the session
    value that continues it for this client (serving/record.py: Conversations.issue)."""
    return {VERSION_HEADER: v.name, **({TRAJECTORY_HEADER: tid} if tid else {}),
            **({SESSION_HEADER: session} if session else {})}


async def _render(tok, messages: list[dict], tools: list[dict] | None) -> list[int]:
    try:
        return await asyncio.to_thread(prompt_ids, tok, messages, tools)
    except (TemplateError, ValueError, TypeError, KeyError, RecursionError) as exc:  # incl. raise_exception
        raise P.ApiError(400, f"the chat template cannot render these messages: {type(exc).__name__}: "
                              f"{str(exc)[:200]}", param="messages") from None


def _chars(value) -> int:
    return len(value) if isinstance(value, str) else len(str(value)) if value else 0


def _refuse_beyond(size: int, bound: int, why: str, param: str) -> None:
    if size > bound:
        raise P.ApiError(400, why, param=param, code="context_length_exceeded")


class _Call:
    """One chat request, parsed and rendered: what generation, the answer and the record need."""

    def __init__(self, st: ServingState, req: P.ChatRequest, session: str | None, client: str = "",
                 identity: str = ""):
        self.st, self.req, self.session, self.client, self.identity = st, req, session, client, identity
        self.tok = st.engine.tokenizer
        self.version = st.engine.resolve(req.model)
        self.template, self.tools, self.lake_messages = P.chat_inputs(req)
        self.id, self.created = P.completion_id("chatcmpl"), P.now()
        self.recording = st.recorder.mode != "off"

    async def prepare(self) -> None:
        self._check_size()
        # the conversation: its trajectory id names the row and the KV the engine keeps for its next call (joined
        # in a worker thread: hashing a long conversation's prefixes must not hold the event loop)
        self.tid, self.call = await asyncio.to_thread(self.st.conversations.join, self.lake_messages, self.session,
                                                      self.client, self.identity)
        self.prompt = await _render(self.tok, self.template, self.tools)
        req = self.req
        top = (req.top_logprobs or 0) if req.logprobs else 0
        self.sampling = P.sampling(req, _budget(self.st, len(self.prompt), req.max_completion_tokens or req.max_tokens),
                                   top, P.stop_tokens(self.tok, req.stop))

    def _check_size(self) -> None:
        """A conversation whose text cannot fit the context is refused before it is hashed or tokenized (a 15 MB
        request went unanswered for minutes): no token covers more than CHARS_PER_TOKEN characters, so more
        characters than that many times the context can never fit."""
        ctx = self.st.engine.context
        if not ctx:
            return
        chars = sum(_chars(m.get(k)) for m in self.template for k in ("content", "reasoning", "tool_calls")) + (
            len(str(self.tools)) if self.tools else 0)  # reasoning and calls too: a 15 MB reasoning took 145 s
        _refuse_beyond(chars, ctx * CHARS_PER_TOKEN, f"the messages hold {chars} characters: more than this model's "
                       f"context of {ctx} tokens can hold (at most {CHARS_PER_TOKEN} characters a token)", "messages")

    @property
    def recorded_id(self) -> str | None:
        return self.tid if self.recording else None

    @property
    def headers(self) -> dict:
        issued = self.st.conversations.issue(self.tid, self.identity) if self.recording else None
        return _headers(self.recorded_id, self.version, issued)

    def reply(self, gen: Generation) -> tuple[dict, str]:
        """(the lake's assistant message, finish_reason)."""
        msg = reply_message(self.tok.decode(gen.token_ids, skip_special_tokens=True), self.call, tools=bool(self.tools))
        finish = "tool_calls" if msg.get("tool_calls") else ("length" if gen.finish_reason == "length" else "stop")
        return msg, finish

    def message(self, msg: dict) -> dict:
        """The reply in OpenAI's shape."""
        out = {"role": "assistant", "content": msg["content"] if msg["content"] or not msg.get("tool_calls") else None}
        if msg.get("tool_calls"):
            out["tool_calls"] = P.openai_tool_calls(msg["tool_calls"])
        if msg.get("reasoning"):
            out["reasoning_content"] = msg["reasoning"]
        return out

    async def record(self, gen: Generation, msg: dict, finish: str, endpoint: str = "chat.completions") -> None:
        """Append the call's row (sync: returns once committed), and remember the conversation for its next call."""
        st, s = self.st, self.sampling
        messages = recorded_messages(self.lake_messages, msg)
        if self.recording:
            await st.recorder.record(call_record(
                trajectory_id=self.tid, label=st.engine.label, version=self.version.info(), messages=messages,
                prompt_ids=self.prompt, token_ids=gen.token_ids, logprobs=gen.logprobs,
                # an issued session is a capability: never in the lake, whose readers see every trajectory id
                metadata={"endpoint": endpoint, "request_id": self.id, "client": self.identity,
                          "session": None if is_issued(self.session) else self.session, "call": self.call,
                          "finish_reason": finish, "tools": self.tools,
                          "sampling": {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_new_tokens,
                                       "stop_token_ids": list(s.stop_token_ids), "seed": self.req.seed,
                                       "top_logprobs": s.top_logprobs}}))
        st.conversations.remember(messages, self.tid, self.call, self.client, finish in ("tool_calls", "length"),
                                  self.identity)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, obj=Depends(json_request), st: ServingState = Depends(get_serving)):
    st.requests += 1
    P.check_messages(obj, st.config.max_messages)
    req = P.parse(P.ChatRequest, obj)
    P.check_common(req)
    call = _Call(st, req, request.headers.get(SESSION_HEADER), client_of(request), request.state.client)
    await call.prepare()
    if req.stream:
        body = _sse_stream(lambda tokens: _stream(call, tokens), st, call.prompt, call.sampling, call.version,
                           req.seed, key=call.tid)
        return StreamingResponse(body, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **call.headers})
    gen = await st.engine.generate(call.prompt, call.sampling, call.version, req.seed, key=call.tid)
    note_tokens(len(call.prompt), len(gen.token_ids))
    msg, finish = call.reply(gen)
    await call.record(gen, msg, finish)
    choice = {"index": 0, "message": call.message(msg), "finish_reason": finish,
              "logprobs": P.chat_logprobs(call.tok, gen) if req.logprobs else None}
    body = {"id": call.id, "object": "chat.completion", "created": call.created, "model": call.version.name,
            "system_fingerprint": call.version.sha256, "choices": [choice],
            "usage": P.usage(len(call.prompt), len(gen.token_ids))}
    return JSONResponse(body, headers=call.headers)


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _shown(text: str, tools: bool) -> str:
    """The part of the text so far that can be streamed as content: with tools, everything before a `<tool_call>`
    (or before a tail that may be the start of one)."""
    if not tools:
        return text
    at = text.find(TOOL_OPEN)
    if at >= 0:
        return text[:at]
    for k in range(min(len(TOOL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_OPEN.startswith(text[-k:]):
            return text[:-k]
    return text


class _Tokens:
    """A generation whose tokens arrive as the engine chooses them, for the streaming answers: `async for ids, lps,
    text in tokens` gives the ids so far, their log-probs and their decoded text each time the text ends on a whole
    character (`text` keeps the latest decode either way); `result()` the Generation once they have all come;
    `cancel()` stops a generation whose client went away."""

    def __init__(self, st: ServingState, prompt: list[int], sampling, version: Version, seed: int | None,
                 key: str | None = None):
        self.tok = st.engine.tokenizer
        self.ids: list[int] = []
        self.text = ""
        self._queue: asyncio.Queue = asyncio.Queue()
        self._task = asyncio.ensure_future(st.engine.generate(
            prompt, sampling, version, seed, on_token=lambda t, lp: self._queue.put_nowait((t, lp)), key=key))
        self._task.add_done_callback(lambda _t: self._queue.put_nowait(None))

    async def __aiter__(self):
        lps: list[float] = []
        while (item := await self._queue.get()) is not None:
            self.ids.append(item[0])
            lps.append(item[1])
            self.text = self.tok.decode(self.ids, skip_special_tokens=True)
            if not self.text.endswith("\ufffd"):  # else half of a multi-byte character: wait for the rest
                yield self.ids, lps, self.text

    def result(self) -> Generation:
        return self._task.result()

    def cancel(self) -> None:
        if not self._task.done():
            self._task.cancel()


async def _sse_stream(body, st: ServingState, prompt: list[int], sampling, version: Version, seed: int | None,
                      key: str | None = None):
    """The framing both streaming endpoints share: the generation starts once the response does, `body(tokens)`
    makes the chunks, then `data: [DONE]`; an error after the status was sent goes in the stream, as OpenAI's does;
    the generation stops when the client goes."""
    tokens = _Tokens(st, prompt, sampling, version, seed, key)
    try:
        async for c in body(tokens):
            yield c
        yield b"data: [DONE]\n\n"
    except P.ApiError as exc:
        yield _sse(exc.body())
    except RecordFailed as exc:  # the record of the call failed: its answer is not complete (no [DONE])
        yield _sse(P.ApiError(503, str(exc), kind="server_error", code="record_failed").body())
    except (GenerationFailed, VersionGone) as exc:
        yield _sse(P.ApiError(500, str(exc), kind="server_error").body())
    finally:
        note_tokens(len(prompt), len(tokens.ids))
        tokens.cancel()


def _usage_chunk(req, head: dict, prompt: list[int], gen: Generation) -> bytes | None:
    """The usage chunk a client asked for with stream_options.include_usage, else None."""
    if req.stream_options is None or not req.stream_options.include_usage:
        return None
    return _sse({**head, "choices": [], "usage": P.usage(len(prompt), len(gen.token_ids))})


async def _stream(call: _Call, tokens: _Tokens):
    req, tok = call.req, call.tok
    head = {"id": call.id, "object": "chat.completion.chunk", "created": call.created, "model": call.version.name,
            "system_fingerprint": call.version.sha256}

    def chunk(delta: dict, finish: str | None = None, logprobs: dict | None = None) -> bytes:
        return _sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    sent, first_unsent = 0, 0
    async for ids, lps, text in tokens:
        shown = _shown(text, bool(call.tools))
        if len(shown) > sent:
            lp = None
            if req.logprobs:
                part = Generation(ids, lps, [])
                lp = P.chat_logprobs(tok, part, first_unsent, len(ids))
            yield chunk({"content": shown[sent:]}, logprobs=lp)
            sent, first_unsent = len(shown), len(ids)
    gen = tokens.result()
    msg, finish = call.reply(gen)
    if msg.get("tool_calls"):
        calls = P.openai_tool_calls(msg["tool_calls"])
        yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
    else:  # what was held back or not yet decoded (a malformed tool call block stays content, unparsed)
        content, streamed = msg["content"] or "", tokens.text[:sent]
        if content.startswith(streamed) and len(content) > len(streamed):
            yield chunk({"content": content[len(streamed):]})
    await call.record(gen, msg, finish)
    yield chunk({}, finish)
    if usage := _usage_chunk(req, head, call.prompt, gen):
        yield usage


class _Completion:
    """One legacy completion request, parsed: the prompt's ids, the version, the sampling."""

    def __init__(self, st: ServingState, req: P.CompletionRequest, session: str | None, identity: str = ""):
        self.st, self.req, self.session, self.identity = st, req, session, identity
        tok = self.tok = st.engine.tokenizer
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise P.ApiError(400, "one prompt per request (send several requests: they are batched together)",
                                 param="prompt")
            prompt = prompt[0]
        if ctx := st.engine.context:  # before it is tokenized (a 15 MB prompt took 133 s, the event loop held)
            text = isinstance(prompt, str)
            _refuse_beyond(len(prompt), ctx * CHARS_PER_TOKEN if text else ctx, f"the prompt holds {len(prompt)} "
                           f"{'characters' if text else 'tokens'}: more than this model's context of {ctx} tokens can "
                           f"hold{f' (at most {CHARS_PER_TOKEN} characters a token)' if text else ''}", "prompt")
        ids = list(prompt) if isinstance(prompt, list) else tok.encode(prompt, add_special_tokens=False)
        if not ids:
            raise P.ApiError(400, "the prompt is empty", param="prompt")
        if any(not 0 <= t < len(tok) for t in ids):
            raise P.ApiError(400, f"the prompt has token ids outside this model's vocabulary of {len(tok)}",
                             param="prompt")
        self.ids, self.prompt_text = ids, prompt if isinstance(prompt, str) else None
        self.version = st.engine.resolve(req.model)
        self.sampling = P.sampling(req, _budget(st, len(ids), req.max_tokens), req.logprobs or 0,
                                   P.stop_tokens(tok, req.stop))
        self.id, self.created = P.completion_id("cmpl"), P.now()
        self.tid = None
        if st.recorder.mode != "off":
            self.tid, _ = st.conversations.join([{"role": "user", "content": self._prompt_text()}], session,
                                                identity=identity)

    @property
    def headers(self) -> dict:
        issued = self.st.conversations.issue(self.tid, self.identity) if self.tid else None
        return _headers(self.tid, self.version, issued)

    def _prompt_text(self) -> str:
        return self.prompt_text if self.prompt_text is not None else self.tok.decode(self.ids)

    def finish(self, gen: Generation) -> str:
        return "length" if gen.finish_reason == "length" else "stop"

    async def record(self, gen: Generation, text: str) -> None:
        if self.tid is None:
            return
        s = self.sampling
        messages = [{"role": "user", "content": self._prompt_text()}, {"role": "assistant", "content": text}]
        await self.st.recorder.record(call_record(
            trajectory_id=self.tid, label=self.st.engine.label, version=self.version.info(), messages=messages,
            prompt_ids=self.ids, token_ids=gen.token_ids, logprobs=gen.logprobs,
            metadata={"endpoint": "completions", "request_id": self.id, "client": self.identity,
                      "finish_reason": self.finish(gen),
                      "sampling": {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_new_tokens,
                                   "seed": self.req.seed}}))


@router.post("/v1/completions")
async def completions(request: Request, obj=Depends(json_request), st: ServingState = Depends(get_serving)):
    """A raw continuation of a prompt (no chat template); `stream: true` sends it as server-sent events."""
    st.requests += 1
    req = P.parse(P.CompletionRequest, obj)
    P.check_common(req)
    for f in ("echo", "suffix"):
        if getattr(req, f):
            raise P.ApiError(400, f"{f} is not supported on /v1/completions here", param=f)
    if req.stream and req.logprobs is not None:  # the engine streams each token's own log-prob, not its top-k
        raise P.ApiError(400, "logprobs with stream is not supported on /v1/completions here: ask without stream",
                         param="logprobs")
    call = _Completion(st, req, request.headers.get(SESSION_HEADER), request.state.client)
    if req.stream:
        body = _sse_stream(lambda tokens: _stream_completion(call, tokens), st, call.ids, call.sampling, call.version,
                           req.seed)
        return StreamingResponse(body, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **call.headers})
    gen = await st.engine.generate(call.ids, call.sampling, call.version, req.seed)
    note_tokens(len(call.ids), len(gen.token_ids))
    text = call.tok.decode(gen.token_ids, skip_special_tokens=True)
    await call.record(gen, text)
    choice = {"index": 0, "text": text, "finish_reason": call.finish(gen),
              "logprobs": P.completion_logprobs(call.tok, gen) if req.logprobs is not None else None}
    body = {"id": call.id, "object": "text_completion", "created": call.created, "model": call.version.name,
            "choices": [choice], "usage": P.usage(len(call.ids), len(gen.token_ids))}
    return JSONResponse(body, headers=call.headers)


async def _stream_completion(call: _Completion, tokens: _Tokens):
    head = {"id": call.id, "object": "text_completion", "created": call.created, "model": call.version.name}

    def chunk(text: str, finish: str | None = None) -> bytes:
        return _sse({**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]})

    sent = 0
    async for _ids, _lps, text in tokens:
        if len(text) > sent:
            yield chunk(text[sent:])
            sent = len(text)
    gen = tokens.result()
    full = call.tok.decode(gen.token_ids, skip_special_tokens=True)
    if full.startswith(tokens.text[:sent]) and len(full) > sent:
        yield chunk(full[sent:])
    await call.record(gen, full)
    yield chunk("", call.finish(gen))
    if usage := _usage_chunk(call.req, head, call.ids, gen):
        yield usage
