"""Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` inside assistant text."""
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
    content: str = ""  # text outside tool calls and think blocks


def parse_tool_calls(text: str) -> ParsedAction:
    """Parse every tool call in an assistant message; malformed blocks become errors, never exceptions."""
    text = text if isinstance(text, str) else str(text)
    thought = "\n".join(m.strip() for m in _THINK.findall(text))
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, raw in enumerate(_BLOCK.findall(text)):
        body = raw.strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(f"tool call {i + 1}: invalid JSON ({exc.msg} at char {exc.pos})")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            errors.append(f"tool call {i + 1}: expected an object with a string \"name\"")
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # OpenAI style: arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                errors.append(f"tool call {i + 1}: \"arguments\" is not a JSON object")
                continue
        if not isinstance(args, dict):
            errors.append(f"tool call {i + 1}: \"arguments\" must be an object")
            continue
        calls.append(ToolCall(obj["name"], args, f"call_{i}"))
    content = _BLOCK.sub("", _THINK.sub("", text)).strip()
    return ParsedAction(calls, errors, thought, content)


def format_tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"
