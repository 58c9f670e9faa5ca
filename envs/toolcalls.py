"""Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` inside assistant text.

The one parser: the environments execute what it returns, the episode recorder (episode.py) stores it,
hermes_eval counts valid tool calls with it and the chat code reads generated replies with it, so what an
environment runs is exactly what the evaluation counts. A final block the model did not close (it
stopped at its end-of-turn token) still counts when its JSON is whole.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    id: str = ""


@dataclass(frozen=True)
class ParsedAction:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one per block that did not parse
    thought: str = ""  # the <think> block, if any
    content: str = ""  # the text without the think blocks and the blocks that parsed (malformed ones stay)

    @property
    def valid_tool_call(self) -> bool:
        """At least one tool call and no malformed block: what hermes_eval counts as a valid reply."""
        return bool(self.calls) and not self.errors


def parse_tool_calls(text: str) -> ParsedAction:
    """Parse every tool call in an assistant message; malformed blocks become errors, never exceptions."""
    text = text if isinstance(text, str) else str(text)
    thought = "\n".join(m.strip() for m in _THINK.findall(text))
    rest = _THINK.sub("", text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    kept: list[str] = []  # the text around the blocks that parsed
    start = 0
    for i, m in enumerate(_BLOCK.finditer(rest)):
        call, error = _parse_block(m.group(1), i)
        if error:
            errors.append(error)
            continue
        calls.append(call)
        kept.append(rest[start:m.start()])
        start = m.end()
    kept.append(rest[start:])
    return ParsedAction(calls, errors, thought, "".join(kept).strip())


def _parse_block(body: str, i: int) -> tuple[ToolCall | None, str]:
    """One block's call, or the error that an observation shows the agent."""
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError as exc:
        return None, f"tool call {i + 1}: invalid JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None, f"tool call {i + 1}: expected an object with a string \"name\""
    args = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"tool call {i + 1}: \"arguments\" is not a JSON object"
    if not isinstance(args, dict):
        return None, f"tool call {i + 1}: \"arguments\" must be an object"
    return ToolCall(obj["name"], args, f"call_{i}"), ""


def format_tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"
