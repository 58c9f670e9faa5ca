"""Normalise chat messages (OpenAI / Atropos / native shapes) into the lake's message struct.

Lake message: {role, content, reasoning, tool_calls: [{id, name, arguments}], tool_call_id, name}.
`normalize_message` reports whether the conversion lost anything (content parts, extra keys), so the
caller can keep the original next to it.
"""
from __future__ import annotations

import orjson

from ingest.errors import BadInput

MESSAGE_KEYS = ("role", "content", "reasoning", "tool_calls", "tool_call_id", "name")
_REASONING_ALIASES = ("reasoning", "reasoning_content", "thinking")


def _content_to_text(content, field):
    if content is None or isinstance(content, str):
        return content, False
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if part.get("type") in (None, "text") and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif part.get("type") in ("image_url", "image", "input_image"):
                    parts.append("[image]")
                else:
                    parts.append(orjson.dumps(part).decode())
            else:
                raise BadInput("content parts must be strings or objects", field=field + [j])
        return "".join(parts), True
    raise BadInput("content must be a string, a list of content parts or null", field=field)


def _norm_tool_call(tc, field, idx):
    if not isinstance(tc, dict):
        raise BadInput("a tool call must be an object", field=field)
    lossy = False
    fn = tc.get("function")
    if isinstance(fn, dict):
        name = fn.get("name")
        args = fn.get("arguments")
        lossy = bool(set(tc) - {"id", "type", "function"}) or tc.get("type") not in (None, "function") \
            or bool(set(fn) - {"name", "arguments"})
    else:
        name = tc.get("name")
        args = tc.get("arguments")
        lossy = bool(set(tc) - {"id", "name", "arguments", "type"})
    if not isinstance(name, str) or not name:
        raise BadInput("a tool call needs a non-empty string name", field=field + ["name"])
    if args is None:
        args = "{}"
    elif not isinstance(args, str):
        args = orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
    tc_id = tc.get("id")
    if tc_id is not None and not isinstance(tc_id, str):
        tc_id = str(tc_id)
        lossy = True
    return {"id": tc_id or f"call_{idx}", "name": name, "arguments": args}, lossy


def normalize_message(msg, field=None, *, require_content=True):
    """-> (lake message dict, lossy: bool). Raises BadInput with the field path."""
    field = list(field or [])
    if not isinstance(msg, dict):
        raise BadInput("a message must be an object", field=field)
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise BadInput("a message needs a string 'role'", field=field + ["role"], kind="missing")
    if require_content and "content" not in msg and not msg.get("tool_calls"):
        raise BadInput("a message needs 'content'", field=field + ["content"], kind="missing")
    content, lossy = _content_to_text(msg.get("content"), field + ["content"])
    reasoning = None
    for key in _REASONING_ALIASES:
        if msg.get(key) is not None:
            reasoning = msg[key]
            if not isinstance(reasoning, str):
                raise BadInput("reasoning must be a string", field=field + [key])
            if key != "reasoning":
                lossy = True
            break
    tool_calls = None
    raw_tcs = msg.get("tool_calls")
    if raw_tcs is not None:
        if not isinstance(raw_tcs, list):
            raise BadInput("tool_calls must be a list", field=field + ["tool_calls"])
        tool_calls = []
        for j, tc in enumerate(raw_tcs):
            t, l2 = _norm_tool_call(tc, field + ["tool_calls", j], j)
            tool_calls.append(t)
            lossy = lossy or l2
        if not tool_calls:
            tool_calls = None
    tcid = msg.get("tool_call_id")
    if tcid is not None and not isinstance(tcid, str):
        raise BadInput("tool_call_id must be a string", field=field + ["tool_call_id"])
    name = msg.get("name")
    if name is not None and not isinstance(name, str):
        raise BadInput("name must be a string", field=field + ["name"])
    extra = set(msg) - set(MESSAGE_KEYS) - set(_REASONING_ALIASES)
    if extra:
        lossy = True
    return {"role": role, "content": content, "reasoning": reasoning, "tool_calls": tool_calls,
            "tool_call_id": tcid, "name": name}, lossy


def normalize_messages(msgs, field=None, *, require_content=True):
    field = list(field or [])
    if not isinstance(msgs, list):
        raise BadInput("messages must be a list of message objects", field=field)
    out, lossy = [], False
    for i, m in enumerate(msgs):
        nm, l2 = normalize_message(m, field + [i], require_content=require_content)
        out.append(nm)
        lossy = lossy or l2
    return out, lossy
