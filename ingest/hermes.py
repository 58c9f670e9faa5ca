"""Hermes Agent ShareGPT trajectories -> native trajectory records.

Two record shapes (hermes-formats.md 1.1): the CLI one `{conversations, timestamp, model, completed}`
and the batch-runner one `{prompt_index, conversations, metadata{batch_num,timestamp,model}, completed,
partial, api_calls, toolsets_used, tool_stats, tool_error_counts}`; both may carry
`compression_metrics`. Turns are `{from, value}` with from in system/human/gpt/tool.

gpt turns: `<think>…</think>` -> reasoning, each `<tool_call>{json}</tool_call>` -> a tool call, the rest
-> content. tool turns: each `<tool_response>{json}</tool_response>` becomes one `tool` message, matched by
position to the previous assistant message's tool calls. The original record is kept in `raw`.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

import orjson

from ingest.errors import BadInput
from ingest.util import stable_hash, text_hash

ROLE_MAP = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
            "tool": "tool", "function": "tool", "observation": "tool"}

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.S)
_SCRATCH_RE = re.compile(r"<REASONING_SCRATCHPAD>(.*?)</REASONING_SCRATCHPAD>", re.S)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_TOOL_RESP_RE = re.compile(r"<tool_response>(.*?)</tool_response>", re.S)
_TOOLS_RE = re.compile(r"<tools>(.*?)</tools>", re.S)


def is_hermes_record(rec) -> bool:
    return isinstance(rec, dict) and isinstance(rec.get("conversations"), list)


def _strip1(s: str) -> str:
    """Strip the newline(s) Hermes puts just inside a tag, keep other whitespace."""
    return s.strip("\n").strip()


def _json_or_text(s: str):
    s = s.strip()
    try:
        return orjson.loads(s)
    except orjson.JSONDecodeError:
        return None


def parse_gpt(value: str, field):
    """-> (content, reasoning, [tool_call dicts {name, arguments}])."""
    reasoning_parts = []
    text = value
    for rx in (_THINK_RE, _SCRATCH_RE):
        for m in rx.finditer(text):
            reasoning_parts.append(_strip1(m.group(1)))
        text = rx.sub("", text)
    if "<think>" in text and "</think>" not in text:
        # an unterminated think block (generation cut off): all of the rest is reasoning
        head, _, tail = text.partition("<think>")
        reasoning_parts.append(_strip1(tail))
        text = head
    calls = []
    for k, m in enumerate(_TOOL_CALL_RE.finditer(text)):
        body = m.group(1).strip()
        obj = _json_or_text(body)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            raise BadInput(f"<tool_call> #{k} is not a JSON object with a string 'name': {body[:80]!r}",
                           field=field, kind="bad_tool_call")
        args = obj.get("arguments", {})
        if isinstance(args, str):
            parsed = _json_or_text(args)
            args_s = args if parsed is None else orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS).decode()
        else:
            args_s = orjson.dumps(args if args is not None else {}, option=orjson.OPT_SORT_KEYS).decode()
        calls.append({"name": obj["name"], "arguments": args_s, "id": obj.get("id")})
    text = _TOOL_CALL_RE.sub("", text)
    reasoning = "\n".join(p for p in reasoning_parts if p) or None
    content = text.strip()
    return content, reasoning, calls


def parse_tool_turn(value: str, field):
    """-> list of (tool_call_id|None, name|None, content_text)."""
    out = []
    blocks = list(_TOOL_RESP_RE.finditer(value))
    if not blocks:
        return [(None, None, value.strip())]
    for m in blocks:
        body = m.group(1).strip()
        obj = _json_or_text(body)
        if isinstance(obj, dict) and ("content" in obj or "name" in obj or "tool_call_id" in obj):
            c = obj.get("content")
            if not isinstance(c, str):
                c = orjson.dumps(c).decode()
            tcid = obj.get("tool_call_id")
            name = obj.get("name")
            out.append((str(tcid) if tcid is not None else None, name if isinstance(name, str) else None, c))
        else:
            out.append((None, None, body))
    return out


def _parse_ts(ts):
    if ts is None:
        return None
    if isinstance(ts, (int, float)):
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()
    if isinstance(ts, str):
        try:
            dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:  # Hermes writes local time without a zone: read it as UTC
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.astimezone(timezone.utc).isoformat()
    return None


def hermes_to_record(rec: dict, *, source_path: str | None = None) -> dict:
    """One Hermes ShareGPT record -> one native trajectory record. Raises BadInput (field path)."""
    if not is_hermes_record(rec):
        raise BadInput("a Hermes record needs a 'conversations' list", field=["conversations"], kind="missing")
    convs = rec["conversations"]
    if not convs:
        raise BadInput("'conversations' is empty", field=["conversations"])
    messages = []
    pending_calls = []  # tool calls of the last assistant message, to match tool responses by position
    call_counter = 0
    first_human = None
    tools = None
    for i, turn in enumerate(convs):
        f = ["conversations", i]
        if not isinstance(turn, dict):
            raise BadInput("a turn must be an object with 'from' and 'value'", field=f)
        frm = turn.get("from", turn.get("role"))
        val = turn.get("value", turn.get("content"))
        if not isinstance(frm, str):
            raise BadInput("a turn needs a string 'from'", field=f + ["from"], kind="missing")
        if frm not in ROLE_MAP:
            raise BadInput(f"unknown turn role {frm!r} (expected system, human, gpt or tool)", field=f + ["from"])
        if not isinstance(val, str):
            raise BadInput("a turn needs a string 'value'", field=f + ["value"], kind="missing")
        role = ROLE_MAP[frm]
        if role == "system":
            m = _TOOLS_RE.search(val)
            if m and tools is None:
                parsed = _json_or_text(m.group(1))
                if isinstance(parsed, list):
                    tools = [t.get("name") if isinstance(t, dict) else t for t in parsed]
            messages.append({"role": "system", "content": val, "reasoning": None, "tool_calls": None,
                             "tool_call_id": None, "name": None})
        elif role == "user":
            if first_human is None:
                first_human = val
            messages.append({"role": "user", "content": val, "reasoning": None, "tool_calls": None,
                             "tool_call_id": None, "name": None})
        elif role == "assistant":
            content, reasoning, calls = parse_gpt(val, f + ["value"])
            tcs = []
            for c in calls:
                cid = c["id"] if isinstance(c.get("id"), str) else f"call_{call_counter}"
                call_counter += 1
                tcs.append({"id": cid, "name": c["name"], "arguments": c["arguments"]})
            pending_calls = tcs
            messages.append({"role": "assistant", "content": content, "reasoning": reasoning,
                             "tool_calls": tcs or None, "tool_call_id": None, "name": None})
        else:  # tool
            results = parse_tool_turn(val, f + ["value"])
            for k, (tcid, name, content) in enumerate(results):
                parent = pending_calls[k] if k < len(pending_calls) else None
                if parent is not None:
                    if tcid and tcid != parent["id"]:
                        parent["id"] = tcid  # the response carries the real call id: adopt it
                    tcid = parent["id"]
                    name = name or parent["name"]
                messages.append({"role": "tool", "content": content, "reasoning": None, "tool_calls": None,
                                 "tool_call_id": tcid, "name": name})
            pending_calls = []
    batch_meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    shape = "hermes.batch" if ("prompt_index" in rec or "tool_stats" in rec or batch_meta) else "hermes.cli"
    model = rec.get("model") if isinstance(rec.get("model"), str) else batch_meta.get("model")
    ts = rec.get("timestamp", batch_meta.get("timestamp"))
    meta = {"format": shape}
    for key in ("completed", "partial", "api_calls", "toolsets_used", "tool_stats", "tool_error_counts",
                "prompt_index", "compression_metrics"):
        if key in rec:
            meta[key] = rec[key]
    if batch_meta:
        meta["batch"] = batch_meta
    if ts is not None:
        meta["timestamp"] = ts
    if tools is not None:
        meta["tools"] = tools
    if source_path:
        meta["source_path"] = source_path
    if first_human and first_human.startswith("[CONTEXT SUMMARY]:"):
        meta["compressed"] = True
    if any(isinstance(m.get("content"), str) and m["content"].startswith("[CONTEXT SUMMARY]:") for m in messages):
        meta["compressed"] = True
    steps = _steps(messages)
    traj_id = rec.get("trajectory_id") if isinstance(rec.get("trajectory_id"), str) else "hermes-" + stable_hash(rec)
    out = {
        "trajectory_id": traj_id,
        "env": "hermes",
        "messages": messages,
        "steps": steps,
        "metadata": meta,
        "raw": rec,
    }
    if first_human is not None:
        out["task_id"] = "hermes-task-" + text_hash(first_human)
    if isinstance(model, str):
        out["model"] = model
    occ = _parse_ts(ts)
    if occ:
        out["occurred_at"] = occ
    if isinstance(rec.get("toolsets_used"), list):
        out["env_tags"] = [str(t) for t in rec["toolsets_used"]]
    return out


def _steps(messages):
    """One step per assistant message: the observation before it, its thought/action, the tool results."""
    steps = []
    last_obs = None
    n = len(messages)
    for i, m in enumerate(messages):
        if m["role"] in ("user", "system"):
            last_obs = m["content"]
        elif m["role"] == "assistant":
            action = m["content"] or ""
            if m["tool_calls"]:
                action = orjson.dumps([{"name": t["name"], "arguments": _json_or_text(t["arguments"])
                                        if t["arguments"].startswith(("{", "[")) else t["arguments"]}
                                       for t in m["tool_calls"]]).decode()
            results = []
            j = i + 1
            while j < n and messages[j]["role"] == "tool":
                results.append(messages[j]["content"] or "")
                j += 1
            steps.append({"observation": last_obs, "thought": m["reasoning"], "action": action,
                          "result": "\n".join(results) if results else None, "reward": None, "done": False})
        elif m["role"] == "tool":
            last_obs = m["content"]
    if steps:
        steps[-1]["done"] = True
    return steps
