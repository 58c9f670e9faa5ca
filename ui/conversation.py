"""A trajectory row as the conversation page shows it: one `Turn` per message (role, text, reasoning to fold,
tool calls with their arguments as structured values, the call a tool result answers) and the steps' rewards.

The split of an assistant's text into content, reasoning and calls is transcript's one parser (through
`assistant_message`): a message the lake holds already split (the usual case: every writer normalises through
transcript/messages.py) is shown as it is; one whose text still carries the format's markup (a writer of its own)
is split the same way a reader of the lake splits it. Arguments are read with `arguments_object` (within the
parser's JSON bounds; text that is not JSON stays text). Nothing here escapes: the templates do, every value.

Bounded: a page holds at most MAX_TURNS turns and MAX_STEPS steps, each text at most FIELD_CHARS characters and all
of them together at most PAGE_CHARS (a `Budget` spent in page order), whatever the row holds (5 MB in one turn,
10,000 turns): what is cut says so (`Clip.total`, `Conversation.total_turns`) and the page links to the whole row
as JSON. Text is valid Unicode: a lone surrogate (which JSON's `\\ud800` escape can put in a tool call's arguments
or a metadata value) becomes U+FFFD (`valid_text`), so neither the page's UTF-8 nor the API's JSON can fail on it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from transcript.messages import arguments_object, assistant_message
from transcript.toolcalls import DEFAULT_FORMAT

FIELD_CHARS = 20_000  # one text of the page (a turn's content, its reasoning, a call's arguments, a step's cell)
PAGE_CHARS = 600_000  # every text of the page together (escaped, at most ~6x the bytes: `"` is &#34;)
MAX_TURNS = 300
MAX_STEPS = 300
MAX_CALLS = 50  # tool calls of one turn
ROLE_CHARS = 40


def valid_text(value: Any) -> Any:
    """`value` (a str, or lists and dicts of them) with every lone surrogate replaced by U+FFFD (a pair stays the
    character it encodes): text that UTF-8 and JSON can always carry."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Clip:
    """A text as the page shows it: its first characters (`text`) and how many it has (`total`)."""

    text: str
    total: int

    @property
    def cut(self) -> bool:
        return len(self.text) < self.total

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        return self.total > 0


class Budget:
    """The characters a page may still show (PAGE_CHARS); each `clip` spends what it keeps."""

    def __init__(self, chars: int = PAGE_CHARS, field_chars: int = FIELD_CHARS):
        self.left, self.field_chars = chars, field_chars

    def clip(self, value: Any) -> Clip:
        """`value` as text (None as ""), valid Unicode, cut to what one field and the page have left."""
        text = valid_text(value if isinstance(value, str) else "" if value is None else str(value))
        n = max(0, min(len(text), self.field_chars, self.left))
        self.left -= n
        return Clip(text[:n], len(text))

    @property
    def spent(self) -> bool:
        return self.left <= 0


@dataclass
class Call:
    id: Clip
    name: Clip
    arguments: Clip  # pretty JSON of the arguments object, or the stored text where it is not JSON

    @classmethod
    def of(cls, call: dict, budget: Budget) -> "Call":
        args = valid_text(arguments_object(call.get("arguments")))
        shown = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
        return cls(budget.clip(call.get("id")), budget.clip(call.get("name")), budget.clip(shown))


@dataclass
class Turn:
    role: str
    content: Clip
    reasoning: Clip
    calls: list[Call] = field(default_factory=list)
    tool_call_id: Clip = Clip("", 0)  # a tool result: the call it answers
    name: Clip = Clip("", 0)  # a tool result: the tool's name
    hidden_calls: int = 0  # calls past the first MAX_CALLS, not shown


@dataclass
class Conversation:
    """The turns and steps a page shows, and how many the row holds."""

    turns: list[Turn]
    total_turns: int
    steps: list[dict[str, Any]]
    total_steps: int
    metadata: Clip

    @property
    def cut(self) -> bool:
        """Whether anything of the row is not on the page."""
        return (len(self.turns) < self.total_turns or len(self.steps) < self.total_steps or self.metadata.cut
                or any(t.content.cut or t.reasoning.cut or t.hidden_calls or any(c.arguments.cut for c in t.calls)
                       for t in self.turns)
                or any(s["action"].cut or s["result"].cut for s in self.steps))


def conversation(row: dict[str, Any], budget: Budget | None = None) -> Conversation:
    """A trajectory row as the page shows it, within `budget` (a fresh page's by default): its turns first, then
    its steps, then its metadata (pretty JSON); what does not fit is counted, not shown."""
    budget = budget or Budget()
    messages, rows = row.get("messages") or [], row.get("steps") or []
    shown = turns(messages, budget)
    cells = steps(rows, budget)
    meta = row.get("metadata")
    meta_text = meta if isinstance(meta, str) or meta is None else json.dumps(valid_text(meta), indent=2,
                                                                                ensure_ascii=False, default=str)
    return Conversation(shown, len(messages), cells, len(rows), budget.clip(meta_text))


def turns(messages: list[dict] | None, budget: Budget | None = None) -> list[Turn]:
    """The messages of a row (the lake form: lake/schemas.py MESSAGE) as turns, in order: at most MAX_TURNS, and
    none once `budget` is spent."""
    budget = budget or Budget()
    out: list[Turn] = []
    assistant = 0
    for m in messages or []:
        if len(out) >= MAX_TURNS or budget.spent:
            break
        m = dict(m or {})
        role = str(m.get("role") or "")
        text = m.get("content") or ""
        if role == "assistant":
            if not m.get("tool_calls") and not m.get("reasoning") and any(t in text for t in DEFAULT_FORMAT.markup):
                split = assistant_message(text, assistant)
                m = {**m, "content": split["content"], "reasoning": split.get("reasoning"),
                     "tool_calls": split.get("tool_calls")}
            assistant += 1
        calls = m.get("tool_calls") or []
        out.append(Turn(role=valid_text(role[:ROLE_CHARS]), content=budget.clip(m.get("content")),
                        reasoning=budget.clip(m.get("reasoning")),
                        calls=[Call.of(c, budget) for c in calls[:MAX_CALLS]],
                        tool_call_id=budget.clip(m.get("tool_call_id")), name=budget.clip(m.get("name")),
                        hidden_calls=max(0, len(calls) - MAX_CALLS)))
    return out


def steps(rows: list[dict] | None, budget: Budget | None = None) -> list[dict[str, Any]]:
    """The steps of a row, numbered from 1 (action and result clipped, reward, done), for the page's table of step
    rewards: at most MAX_STEPS, and none once `budget` is spent."""
    budget = budget or Budget()
    out = []
    for i, s in enumerate(rows or [], 1):
        if i > MAX_STEPS or budget.spent:
            break
        s = s or {}
        out.append({"n": i, "action": budget.clip(s.get("action")), "result": budget.clip(s.get("result")),
                    "reward": s.get("reward"), "done": s.get("done")})
    return out
