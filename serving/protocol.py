"""The OpenAI API's shapes: request bodies as pydantic models (checked before anything runs), their translation into
what the model sees (messages -> the chat template's input, stop strings -> stop tokens, sampling), and the
response bodies and stream chunks.

Supported as OpenAI documents them: messages with text content (a string or text parts), `tools` (function tools,
rendered by the model's own chat template), `tool_choice` auto/none, temperature, top_p, max_tokens /
max_completion_tokens, stop (strings that are one token of this model), seed, stream (+ stream_options
include_usage), logprobs / top_logprobs (<= 20). Refused with a 400 that names the field: n > 1, image or audio
parts, tool_choice required or a named function, echo, suffix, several prompts in one /v1/completions request,
logprobs with stream on /v1/completions.
Accepted and ignored (they change nothing here): user, metadata, parallel_tool_calls, store, presence_penalty and
frequency_penalty at 0.

Log-probs are the log-softmax of the model's raw (temperature 1) float32 logits at each chosen token: the number
the trainer computes for that token, whatever temperature sampled it.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainers.generation.generate import Generation, Sampling
from transcript.messages import MessageError, normalize_messages, template_message
from transcript.toolcalls import JsonBoundsError, loads_bounded

MAX_TOP_LOGPROBS = 20
MAX_NESTING = 32  # levels of objects and arrays in a tool schema or call arguments (the chat template recurses)
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ApiError(Exception):
    """A 4xx/5xx in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields are ignored, as by OpenAI's own server


class FunctionDef(_Body):
    name: str
    description: Optional[str] = None
    parameters: Optional[dict] = None
    strict: Optional[bool] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("a function name is 1-64 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: dict | None) -> dict | None:
        if v is None:
            return v
        if v.get("type", "object") != "object":
            raise ValueError("parameters must be a JSON Schema of type object")
        if not isinstance(v.get("properties", {}), dict):
            raise ValueError("parameters.properties must be an object")
        return _shallow(v)


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class CallFunction(_Body):
    name: str
    arguments: Union[str, dict] = "{}"

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, v: str | dict) -> str | dict:
        if isinstance(v, str):  # arguments as JSON text are parsed for the template: bounded the same, before
            try:  # they are parsed (transcript/toolcalls.py: the parser recurses)
                loads_bounded(v, depth=MAX_NESTING)
            except JsonBoundsError as exc:
                raise ValueError(str(exc)) from None
            except ValueError:  # not JSON: the template shows the text as it is
                pass
            return v
        return _shallow(v)


def _shallow(value: Any) -> Any:
    """`value` if its objects and arrays nest at most MAX_NESTING levels (counted without recursion), else a
    ValueError: the chat template renders them recursively (300 levels were a RecursionError, a 500)."""
    level = [value]
    for _ in range(MAX_NESTING + 1):
        level = [c for x in level for c in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
        if not level:
            return value
    raise ValueError(f"nested deeper than {MAX_NESTING} levels")


class ToolCallIn(_Body):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: CallFunction


class TextPart(_Body):
    type: str
    text: Optional[str] = None

    @field_validator("type")
    @classmethod
    def _text_only(cls, v: str) -> str:
        if v != "text":
            raise ValueError(f"content parts of type {v!r} are not supported: this model reads text only")
        return v


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCallIn]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content)
        return self.content or ""


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampled(_Body):
    model: str
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    n: Optional[int] = Field(1, ge=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Union[str, list[str], None] = None
    seed: Optional[int] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None


class ChatRequest(_Sampled):
    messages: list[Message] = Field(min_length=1)
    tools: Optional[list[Tool]] = None
    tool_choice: Union[str, dict, None] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionRequest(_Sampled):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    max_tokens: Optional[int] = Field(16, ge=1)
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: Optional[str] = None


def parse(model: type[BaseModel], obj: Any) -> Any:
    """The body as `model`, or a 400 naming the first bad field (`messages.0.role: ...`)."""
    if not isinstance(obj, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        e = max(exc.errors(), key=lambda e: len(e["loc"]))  # of a union's branches, the one that got furthest
        where = ".".join(str(p) for p in e["loc"] if not str(p).startswith(("function-", "union[", "str", "list[")))
        msg = e["msg"].removeprefix("Value error, ")
        raise ApiError(400, f"{where}: {msg}" if where else msg, param=where or None) from None


def check_messages(obj: Any, limit: int) -> None:
    """A chat body's message count within --max-messages (a 400), looked at before the messages are parsed."""
    messages = obj.get("messages") if isinstance(obj, dict) else None
    if isinstance(messages, list) and len(messages) > limit:
        raise ApiError(400, f"messages: {len(messages)} messages, at most {limit} per request "
                            "(lake serve-model --max-messages)", param="messages")


def check_common(req: _Sampled) -> None:
    """The refusals every endpoint shares (400 naming the field)."""
    if (req.n or 1) > 1:
        raise ApiError(400, "n > 1 is not supported: send n requests (concurrent requests are batched together)",
                       param="n")
    for f in ("presence_penalty", "frequency_penalty"):
        if getattr(req, f):
            raise ApiError(400, f"{f} is not supported (only 0)", param=f)


def chat_inputs(req: ChatRequest) -> tuple[list[dict], list[dict] | None, list[dict]]:
    """(the chat template's messages, its tools or None, the lake's messages) of a chat request."""
    if req.tool_choice not in (None, "auto", "none"):
        raise ApiError(400, "tool_choice must be auto or none here (required and named functions are not "
                            "supported)", param="tool_choice")
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools and req.tool_choice != "none" else None
    raw = [{"role": m.role, "content": m.text(), "name": m.name, "tool_call_id": m.tool_call_id,
            "reasoning": m.reasoning_content,
            "tool_calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                           for c in m.tool_calls or []] or None} for m in req.messages]
    try:  # the message model's one normaliser: the lake's messages, as an importer would store them
        lake, _ = normalize_messages(raw, require_content=False, incoming=True)  # a call beyond the bounds: a 400
    except MessageError as exc:
        where = ".".join(["messages", *map(str, exc.field[:1])])
        raise ApiError(400, f"{where}: {exc}", param=where) from None
    return [template_message(m) for m in lake], tools, lake


def stop_tokens(tok, stop: str | list[str] | None) -> tuple[int, ...]:
    """Stop strings as stop tokens: each must be one token of this model (a longer one is a 400)."""
    out = []
    for s in [stop] if isinstance(stop, str) else (stop or []):
        ids = tok.encode(s, add_special_tokens=False)
        if len(ids) != 1:
            raise ApiError(400, f"stop {s!r} is {len(ids)} tokens of this model: only single-token stop strings "
                                "are supported", param="stop")
        out.append(ids[0])
    return tuple(out)


def sampling(req: _Sampled, max_new: int, top_logprobs: int, stops: tuple[int, ...]) -> Sampling:
    """OpenAI's defaults: temperature 1, top_p 1."""
    t = 1.0 if req.temperature is None else req.temperature
    return Sampling(max_new_tokens=max_new, temperature=t, top_p=req.top_p or 1.0, top_logprobs=top_logprobs,
                    stop_token_ids=stops)


def completion_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


# -- logprobs ------------------------------------------------------------------------------------------------------
def _tok_text(tok, tid: int) -> str:
    return tok.decode([tid])


def chat_logprobs(tok, gen: Generation, start: int = 0, end: int | None = None) -> dict:
    """choices[].logprobs of a chat completion for tokens [start, end)."""
    content = []
    for i in range(start, len(gen.token_ids) if end is None else end):
        t = _tok_text(tok, gen.token_ids[i])
        top = [{"token": _tok_text(tok, a), "logprob": lp, "bytes": list(_tok_text(tok, a).encode())}
               for a, lp in (gen.top_logprobs[i] if gen.top_logprobs else [])]
        content.append({"token": t, "logprob": gen.logprobs[i], "bytes": list(t.encode()), "top_logprobs": top})
    return {"content": content}


def completion_logprobs(tok, gen: Generation) -> dict:
    """choices[].logprobs of a legacy completion."""
    tokens, offsets, pos = [], [], 0
    for tid in gen.token_ids:
        t = _tok_text(tok, tid)
        tokens.append(t)
        offsets.append(pos)
        pos += len(t)
    top = [{_tok_text(tok, a): lp for a, lp in row} for row in gen.top_logprobs] if gen.top_logprobs else None
    return {"tokens": tokens, "token_logprobs": list(gen.logprobs), "top_logprobs": top, "text_offset": offsets}


def usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_tool_calls(calls: list[dict]) -> list[dict]:
    """The recorder's tool calls ({id, name, arguments: dict}) in OpenAI's shape (arguments as JSON text)."""
    return [{"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for c in calls]
