"""Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` inside assistant text.

The one parser of an assistant's text: the environments execute what it returns, the episode recorder, the
model server and every importer split a reply with it (through envs/messages.py), and hermes_eval counts valid
tool calls with it, so the same text is the same content, reasoning and tool calls wherever it is read.

What it reads (the union of what the environments and the Hermes importer read before it was one):
- reasoning: each `<think>…</think>` and `<REASONING_SCRATCHPAD>…</REASONING_SCRATCHPAD>` block (calls inside
  one are thought, not calls); a block the model did not close (it stopped, or was cut off) is reasoning up
  to the first `<tool_call>` after it, or to the end.
- calls: each `<tool_call>` block whose JSON is an object with a string "name" and object "arguments" (an
  OpenAI-style JSON string of an object counts). A final block the model did not close (it stopped at its
  end-of-turn token) still counts when its JSON is whole.
- errors: one line per block that did not parse, never an exception; such a block stays in the content, so
  the text the model wrote is never lost. What an error means is the caller's: an environment answers it, the
  Hermes importer refuses the turn.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
REASONING_TAGS = (("<think>", "</think>"), ("<REASONING_SCRATCHPAD>", "</REASONING_SCRATCHPAD>"))
_REASONING = re.compile("|".join(f"{re.escape(a)}(.*?){re.escape(b)}" for a, b in REASONING_TAGS), re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    id: str = ""


@dataclass(frozen=True)
class ParsedAction:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one per block that did not parse
    thought: str = ""  # the reasoning blocks' text, one line break between blocks ("" when none)
    content: str = ""  # the text without the reasoning and the blocks that parsed (malformed ones stay)

    @property
    def valid_tool_call(self) -> bool:
        """At least one tool call and no malformed block: what hermes_eval counts as a valid reply."""
        return bool(self.calls) and not self.errors


def parse_tool_calls(text: str) -> ParsedAction:
    """Parse every tool call in an assistant message; malformed blocks become errors, never exceptions."""
    text = text if isinstance(text, str) else str(text)
    thoughts = [next(g for g in m.groups() if g is not None).strip() for m in _REASONING.finditer(text)]
    rest = _REASONING.sub("", text)
    rest, unclosed = _unclosed_reasoning(rest)
    thought = "\n".join(t for t in thoughts + [unclosed] if t)
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
    content = "".join(kept)
    # stripped where something was taken out (the line breaks around it); a plain reply stays as written
    return ParsedAction(calls, errors, thought, content.strip() if calls or content != text else content)


def _unclosed_reasoning(text: str) -> tuple[str, str]:
    """(the text without an unclosed reasoning block, that block's reasoning): it runs from its tag to the first
    `<tool_call>` after it or the end (a model cut off mid-thought, or one that went on to call without closing)."""
    for tag, _ in REASONING_TAGS:
        head, found, tail = text.partition(tag)
        if found:
            thought, call, after = tail.partition("<tool_call>")
            return head + call + after, thought.strip()
    return text, ""


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
