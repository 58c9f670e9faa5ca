"""A trajectory row as the conversation page shows it: one `Turn` per message (role, text, reasoning to fold,
tool calls with their arguments as structured values, the call a tool result answers) and the steps' rewards.

The split of an assistant's text into content, reasoning and calls is transcript's one parser (through
`assistant_message`): a message the lake holds already split (the usual case: every writer normalises through
transcript/messages.py) is shown as it is; one whose text still carries the format's markup (a writer of its own)
is split the same way a reader of the lake splits it. Arguments are read with `arguments_object` (within the
parser's JSON bounds; text that is not JSON stays text). Nothing here escapes: the templates do, every value.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from transcript.messages import arguments_object, assistant_message
from transcript.toolcalls import DEFAULT_FORMAT


@dataclass
class Call:
    id: str
    name: str
    arguments: str  # pretty JSON of the arguments object, or the stored text where it is not JSON

    @classmethod
    def of(cls, call: dict) -> "Call":
        args = arguments_object(call.get("arguments"))
        shown = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
        return cls(str(call.get("id") or ""), str(call.get("name") or ""), shown)


@dataclass
class Turn:
    role: str
    content: str = ""
    reasoning: str = ""
    calls: list[Call] = field(default_factory=list)
    tool_call_id: str = ""  # a tool result: the call it answers
    name: str = ""  # a tool result: the tool's name


def turns(messages: list[dict] | None) -> list[Turn]:
    """The messages of a row (the lake form: lake/schemas.py MESSAGE) as turns, in order."""
    out = []
    assistant = 0
    for m in messages or []:
        m = dict(m or {})
        role = str(m.get("role") or "")
        text = m.get("content") or ""
        if role == "assistant":
            if not m.get("tool_calls") and not m.get("reasoning") and any(t in text for t in DEFAULT_FORMAT.markup):
                split = assistant_message(text, assistant)
                m = {**m, "content": split["content"], "reasoning": split.get("reasoning"),
                     "tool_calls": split.get("tool_calls")}
            assistant += 1
        out.append(Turn(role=role, content=m.get("content") or "", reasoning=m.get("reasoning") or "",
                        calls=[Call.of(c) for c in m.get("tool_calls") or []],
                        tool_call_id=m.get("tool_call_id") or "", name=m.get("name") or ""))
    return out


def steps(rows: list[dict] | None) -> list[dict[str, Any]]:
    """The steps of a row, numbered from 1 (action, result, reward, done), for the page's table of step rewards."""
    return [{"n": i, **(s or {})} for i, s in enumerate(rows or [], 1)]
