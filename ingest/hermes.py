"""Hermes Agent ShareGPT trajectories -> native trajectory records.

Two record shapes (hermes-formats.md 1.1): the CLI one `{conversations, timestamp, model, completed}`
and the batch-runner one `{prompt_index, conversations, metadata{batch_num,timestamp,model}, completed,
partial, api_calls, toolsets_used, tool_stats, tool_error_counts}`; both may carry
`compression_metrics`. Turns are `{from, value}` with from in system/human/gpt/tool.

Turns become messages through the message model (transcript/messages.py), so a gpt turn's text is the message the
model server and the environments make of the same reply: reasoning blocks -> reasoning, each
`<tool_call>{json}</tool_call>` -> a tool call, the rest -> content; a malformed block is refused (Hermes writes
only whole calls, hermes-formats.md 1.1). tool turns: each `<tool_response>{json}</tool_response>` becomes one
`tool` message, tied by position to the previous assistant message's tool calls (whose made-up ids yield to the
responses' real ones). The record is built by the one row builder; the original is kept in `raw`.

JSON inside a turn's text (a call, a tool response, the system turn's <tools>) is read within the one parser's
bounds (transcript/toolcalls.py: 64 levels, 8 MiB a call): a call beyond them refuses the record with its reason, a
tool response or tool list beyond them is kept as text. Tagged blocks are found in one pass (`_blocks`): a regex
retried from every unclosed `<tool_response>` took minutes on a megabyte of them.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterator

import orjson

from edge.errors import BadInput
from ingest.util import stable_hash, text_hash
from transcript.messages import ROLE_MAP, MessageError, normalize_messages
from transcript.toolcalls import loads_bounded
from transcript.trajectory_row import trajectory_row


def is_hermes_record(rec) -> bool:
    return isinstance(rec, dict) and isinstance(rec.get("conversations"), list)


def _json_or_text(s: str):
    """The JSON value of `s`, or None where it is not JSON or is beyond the bounds (any size: a tool's output)."""
    s = s.strip()
    try:
        return loads_bounded(s, orjson.loads, chars=None)
    except ValueError:
        return None


def _blocks(text: str, tag: str) -> Iterator[str]:
    """The inside of each `<tag>…</tag>` block, left to right, each closed by the first `</tag>` after it: what
    the regex `<tag>(.*?)</tag>` finds, in one pass (once a tag is not closed, no later one is)."""
    opening, closing, pos = f"<{tag}>", f"</{tag}>", 0
    while (start := text.find(opening, pos)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            return
        yield text[start + len(opening):end]
        pos = end + len(closing)


def parse_tool_turn(value: str, field):
    """-> list of (tool_call_id|None, name|None, content_text)."""
    out = []
    blocks = list(_blocks(value, "tool_response"))
    if not blocks:
        return [(None, None, value.strip())]
    for block in blocks:
        body = block.strip()
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
    turns, where = [], []  # the messages before normalising, and the turn each came from
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
        if role == "tool":
            for tcid, name, content in parse_tool_turn(val, f + ["value"]):
                turns.append({"role": "tool", "content": content, "tool_call_id": tcid, "name": name})
                where.append(i)
            continue
        if role == "system" and tools is None and (listed := next(_blocks(val, "tools"), None)) is not None:
            parsed = _json_or_text(listed)
            if isinstance(parsed, list):
                tools = [t.get("name") if isinstance(t, dict) else t for t in parsed]
        if role == "user" and first_human is None:
            first_human = val
        turns.append({"role": role, "content": val})
        where.append(i)
    try:
        messages, _ = normalize_messages(turns, strict_calls=True, incoming=True)
    except MessageError as exc:  # a malformed <tool_call> in a gpt turn
        raise BadInput(exc.message, field=["conversations", where[exc.field[0]], "value"], kind=exc.kind) from None
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
    optional = {}
    if first_human is not None:
        optional["task_id"] = "hermes-task-" + text_hash(first_human)
    if isinstance(model, str):
        optional["model"] = model
    if occ := _parse_ts(ts):
        optional["occurred_at"] = occ
    if isinstance(rec.get("toolsets_used"), list):
        optional["env_tags"] = [str(t) for t in rec["toolsets_used"]]
    return trajectory_row(trajectory_id=traj_id, env="hermes", messages=messages, steps=steps, metadata=meta,
                          raw=rec, **optional)


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
