"""Tool calls inside assistant text, in the one format every caller goes through: Hermes'
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks with `<think>` reasoning.

The one parser of an assistant's text: the environments execute what it returns, the episode recorder, the
model server and every importer split a reply with it (through transcript/messages.py), and hermes_eval counts valid
tool calls with it, so the same text is the same content, reasoning and tool calls wherever it is read.

A format is a `ToolCallFormat` (as vLLM's tool parsers are): `parse` a reply into a `ParsedAction`, `format` one
call as the model writes it, and its `markup` (the strings without which a text is plain content). `DEFAULT_FORMAT`
is `HERMES`; `parse_tool_calls` and `format_tool_call` go through it, so another model family's format is one more
class beside `HermesFormat`, not a change to the callers.

What the Hermes format reads (the union of what the environments and the Hermes importer read before it was one):
- reasoning: each `<think>…</think>` and `<REASONING_SCRATCHPAD>…</REASONING_SCRATCHPAD>` block (calls inside
  one are thought, not calls); a block the model did not close (it stopped, or was cut off) is reasoning up
  to the first `<tool_call>` after it, or to the end.
- calls: each `<tool_call>` block whose JSON is an object with a string "name" and object "arguments" (an
  OpenAI-style JSON string of an object counts). A final block the model did not close (it stopped at its
  end-of-turn token) still counts when its JSON is whole.
- errors: one line per block that did not parse, never an exception; such a block stays in the content, so
  the text the model wrote is never lost. What an error means is the caller's: an environment answers it, the
  Hermes importer refuses the turn.

Bounds (`loads_bounded`, for every JSON this project reads out of text: a call's block and its "arguments" string
here, arguments and tool responses in the importers and the model server): at most MAX_JSON_DEPTH (64) levels of
objects and arrays, counted by one linear scan outside strings BEFORE the text is parsed, and at most
MAX_JSON_CHARS (8 MiB) in one call. Why: the stdlib parser recurses, so a 10 KB call nested 5,000 deep was a
RecursionError (a 500 in both servers, a traceback from `lake import`, the end of a rollout); orjson stops at 1,024
levels but what it returns is then rendered and dumped recursively. No tool a model calls needs 64 levels, nor a
call of 8 MiB (~2M tokens, beyond any model's context). A block beyond them is an error like any malformed one,
also listed in `ParsedAction.beyond_bounds`: where text comes in (a chat request, an imported record) the message
normaliser refuses it with its reason, where a model wrote it (a reply, a rollout) it is an error the agent is
shown. Reasoning blocks are found by a linear scan too (a regex retried from every unclosed `<think>` took 74 s on
224 KB of them).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
REASONING_TAGS = (("<think>", "</think>"), ("<REASONING_SCRATCHPAD>", "</REASONING_SCRATCHPAD>"))
MAX_JSON_DEPTH = 64  # levels of objects and arrays in JSON read out of text (module docstring: Bounds)
MAX_JSON_CHARS = 8 << 20  # characters of one tool call's JSON
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)  # a JSON string, or an unclosed one to the end
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")


class JsonBoundsError(ValueError):
    """JSON text beyond MAX_JSON_DEPTH levels or its size bound, refused before it is parsed: the message is one
    line saying which bound."""


def json_bounds_error(text: str, depth: int = MAX_JSON_DEPTH, chars: int | None = MAX_JSON_CHARS) -> str:
    """Why `text` may not be parsed as JSON ("" when it may): more than `chars` characters (None: any size), or
    objects and arrays nested more than `depth` levels, counted in one pass outside strings, without recursion.
    Unclosed brackets count: the parser recurses into them before it finds the text invalid."""
    if chars is not None and len(text) > chars:
        return f"{len(text)} characters of JSON, over the bound of {chars}"
    if text.count("[") + text.count("{") <= depth:
        return ""
    level = 0
    for c in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if c in "[{":
            level += 1
            if level > depth:
                return f"JSON nested deeper than {depth} levels"
        else:
            level -= 1
    return ""


def loads_bounded(text: str, loads: Callable[[str], Any] = json.loads, *, depth: int = MAX_JSON_DEPTH,
                  chars: int | None = MAX_JSON_CHARS) -> Any:
    """`loads(text)` once `text` is within the bounds (`json_bounds_error`), else JsonBoundsError. Both it and the
    parsers' JSONDecodeError are ValueErrors: a caller catches ValueError and never sees a RecursionError."""
    why = json_bounds_error(text, depth, chars)
    if why:
        raise JsonBoundsError(why)
    return loads(text)


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
    beyond_bounds: list[str] = field(default_factory=list)  # those of errors that broke a bound (module docstring)

    @property
    def valid_tool_call(self) -> bool:
        """At least one tool call and no malformed block: what hermes_eval counts as a valid reply."""
        return bool(self.calls) and not self.errors


class ToolCallFormat(Protocol):
    """How one model family writes tool calls and reasoning in its replies."""

    markup: tuple[str, ...]  # the strings one of which a text holds when it may hold calls or reasoning

    def parse(self, text: str) -> ParsedAction:
        """Every tool call in an assistant message; a malformed call is an error in the result, never an exception."""
        ...

    def format(self, name: str, arguments: dict) -> str:
        """One call as the model writes it (what a scripted policy sends an environment)."""
        ...


class HermesFormat:
    """Hermes' `<tool_call>` JSON blocks and `<think>` / `<REASONING_SCRATCHPAD>` reasoning (module docstring)."""

    markup = tuple(tag for tag, _ in REASONING_TAGS) + ("<tool_call>",)

    def parse(self, text: str) -> ParsedAction:
        text = text if isinstance(text, str) else str(text)
        rest, thoughts = _closed_reasoning(text)
        rest, unclosed = _unclosed_reasoning(rest)
        thought = "\n".join(t for t in thoughts + [unclosed] if t)
        calls: list[ToolCall] = []
        errors: list[str] = []
        beyond: list[str] = []
        kept: list[str] = []  # the text around the blocks that parsed
        start = 0
        for i, m in enumerate(_BLOCK.finditer(rest)):
            try:
                call, error = _parse_block(m.group(1), i)
            except JsonBoundsError as exc:
                call, error = None, f"tool call {i + 1}: {exc}"
                beyond.append(error)
            if error:
                errors.append(error)
                continue
            calls.append(call)
            kept.append(rest[start:m.start()])
            start = m.end()
        kept.append(rest[start:])
        content = "".join(kept)
        # stripped where something was taken out (the line breaks around it); a plain reply stays as written
        return ParsedAction(calls, errors, thought, content.strip() if calls or content != text else content, beyond)

    def format(self, name: str, arguments: dict) -> str:
        call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"<tool_call>\n{call}\n</tool_call>"


HERMES = HermesFormat()
DEFAULT_FORMAT: ToolCallFormat = HERMES  # the format of every reply this project reads and every call it writes


def parse_tool_calls(text: str) -> ParsedAction:
    """Parse every tool call in an assistant message (DEFAULT_FORMAT); malformed blocks become errors, never
    exceptions."""
    return DEFAULT_FORMAT.parse(text)


def format_tool_call(name: str, arguments: dict) -> str:
    """One call as DEFAULT_FORMAT writes it."""
    return DEFAULT_FORMAT.format(name, arguments)


def _closed_reasoning(text: str) -> tuple[str, list[str]]:
    """(the text without its closed reasoning blocks, each block's stripped text): a block runs from its tag to the
    first closing tag after it, blocks do not overlap, and a tag never closed is left in the text. One pass: where a
    tag is never closed again, none of its later openings is tried."""
    kept: list[str] = []
    thoughts: list[str] = []
    pos = 0
    found = {tag: text.find(tag) for tag, _ in REASONING_TAGS}  # the next opening of each tag at or after pos
    closes = dict(REASONING_TAGS)
    while True:
        for tag in found:
            if 0 <= found[tag] < pos:
                found[tag] = text.find(tag, pos)
        live = [(at, tag) for tag, at in found.items() if at >= 0]
        if not live:
            break
        at, tag = min(live)
        end = text.find(closes[tag], at + len(tag))
        if end < 0:  # never closed after here: neither is any later opening of this tag
            found[tag] = -1
            continue
        kept.append(text[pos:at])
        thoughts.append(text[at + len(tag):end].strip())
        pos = end + len(closes[tag])
    kept.append(text[pos:])
    return "".join(kept), thoughts


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
    """One block's call, or the error that an observation shows the agent; JsonBoundsError for a block beyond the
    bounds (its "arguments" string included)."""
    try:
        obj = loads_bounded(body.strip())
    except JsonBoundsError:
        raise
    except json.JSONDecodeError as exc:
        return None, f"tool call {i + 1}: invalid JSON ({exc.msg} at char {exc.pos})"
    except ValueError as exc:  # valid JSON Python will not read: an integer of more than 4300 digits
        return None, f"tool call {i + 1}: invalid JSON ({str(exc).split(':')[0]})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None, f"tool call {i + 1}: expected an object with a string \"name\""
    args = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = loads_bounded(args) if args.strip() else {}
        except JsonBoundsError as exc:
            raise JsonBoundsError(f"\"arguments\": {exc}") from None
        except ValueError:
            return None, f"tool call {i + 1}: \"arguments\" is not a JSON object"
    if not isinstance(args, dict):
        return None, f"tool call {i + 1}: \"arguments\" must be an object"
    return ToolCall(obj["name"], args, f"call_{i}"), ""

