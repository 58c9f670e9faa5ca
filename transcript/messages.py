"""The one model of a chat message and its tool calls: the role map, the normaliser, and a reply split into a
message. Every writer of the lake's `messages` (the episode recorder, the model server, the Hermes, Atropos and
native importers) and every reader that renders them through a chat template (SFT, DPO, the server's prompts) goes
through it, so one conversation is the same messages whichever way it came in.

Why here: transcript/ is the message model below every wing that writes or reads messages (envs, ingest, serving,
trainers), and it imports nothing of ours. The lake's struct (lake/schemas.py MESSAGE) is what the lake form below
fills, but the message model does not import the lake; tests/test_message_model.py holds the two to the same keys.

Two forms of one message:
- lake form (`normalize_message(s)`): the trajectories table's struct, every key present:
  {role, content: str | None, reasoning: str | None, tool_calls: [{id, name, arguments: JSON text}] | None,
  tool_call_id: str | None, name: str | None}.
- play form: what an environment, a generation loop and a chat template read: tool-call arguments as objects,
  content a string, keys only where set. `assistant_message(text, turn)` splits a reply into it (with call ids);
  `template_messages` gives the chat template's input from any spelling (no ids: templates do not render them).
  The lake takes the play form too (lake/records.py writes object arguments as the same JSON text).

The rules, in one place:
- role: ROLE_MAP's (ShareGPT's human/gpt, OpenAI's developer, function and observation turns); any other role is
  an error naming the field.
- content: a string, null, or OpenAI content parts (text kept, an image as "[image]", another part as its JSON).
- reasoning: `reasoning`, or its spellings `reasoning_content` and `thinking`.
- an assistant message with neither tool calls nor reasoning whose text holds the tool-call format's markup (Hermes':
  <think>, <REASONING_SCRATCHPAD>, <tool_call>) is split by the one parser (transcript/toolcalls.py), as the model
  server and the environments split a reply; a malformed block stays in the content (`strict_calls`: it is an error
  instead).
- bounds: JSON in text (a `<tool_call>` block, an `arguments` string, a conversation given as JSON text) is read
  within the parser's bounds (transcript/toolcalls.py: 64 levels, 8 MiB a call), never into a RecursionError. Where
  messages come in (`incoming`: a chat request, an imported record) a call beyond them is an error naming the
  field, text no model writes in earnest; elsewhere (a reply, a reader of the lake) such a block stays in the
  content and such arguments stay text, as any malformed call does.
- tool calls: OpenAI's {id, type, function: {name, arguments}} or flat {id, name, arguments}; arguments an object
  or JSON text, kept as compact JSON text in the key order written (`arguments_text`); text that is not JSON stays
  as it is.
- ids: a call without one is `call_{turn}_{j}` (turn: the assistant message's place among the conversation's
  assistant messages; j: the call's place in it). A tool message without `tool_call_id` answers the previous
  assistant message's next call and gets its id; a made-up call id yields to the id of the tool message that
  answers it by position (Hermes' tool responses carry the real ones). A tool message without `name` gets its
  call's.
- lossy: the lake form alone does not give the input back (something converted, split, filled in or dropped);
  the caller keeps the original beside it (`raw`).
"""
from __future__ import annotations

import json
from typing import Any

import orjson

from transcript.toolcalls import DEFAULT_FORMAT, JsonBoundsError, json_bounds_error, loads_bounded, parse_tool_calls

ROLES = ("system", "user", "assistant", "tool")
ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
            "gpt": "assistant", "function_call": "assistant", "tool": "tool", "function": "tool",
            "observation": "tool"}
MESSAGE_KEYS = ("role", "content", "reasoning", "tool_calls", "tool_call_id", "name")
TOOL_CALL_KEYS = ("id", "name", "arguments")
REASONING_KEYS = ("reasoning", "reasoning_content", "thinking")
_MARKUP = DEFAULT_FORMAT.markup  # a text holding none of these is plain content, never parsed


class MessageError(ValueError):
    """A message that cannot be read: the message names what is wrong, `field` where (a path of keys and
    indexes from the conversation), `kind` the sort (missing, bad_tool_call, value_error)."""

    def __init__(self, message: str, field: list | None = None, kind: str = "value_error"):
        super().__init__(message)
        self.message, self.field, self.kind = message, list(field or []), kind


def call_id(turn: int, j: int) -> str:
    """The id of the j-th call of the conversation's turn-th assistant message, where none was given."""
    return f"call_{turn}_{j}"


def arguments_text(args: Any) -> str:
    """Tool-call arguments as the lake stores them: compact JSON text, keys in the order written (what
    lake/records.py makes of object arguments); text that is not JSON as it is; none as {}."""
    if args is None:
        return "{}"
    if isinstance(args, str):
        try:
            args = loads_bounded(args, orjson.loads)
        except ValueError:  # not JSON, or beyond the bounds
            return args
    try:
        return orjson.dumps(args).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: the stdlib writes it
        return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def arguments_object(text: Any) -> Any:
    """The arguments a tool runs and a chat template renders: an object where the text parses, {} for none."""
    if isinstance(text, str):
        try:
            return loads_bounded(text) if text.strip() else {}
        except ValueError:  # not JSON, or beyond the bounds
            return text
    return {} if text is None else text


def assistant_message(text: str, turn: int) -> dict:
    """A reply's text as an assistant message in the play form: the reasoning blocks to `reasoning`, each
    `<tool_call>` that parsed to `tool_calls` [{id, name, arguments}] (ids `call_{turn}_{j}`), the rest (a
    malformed block included) to `content`. The chat template renders it back to the same text, no call twice."""
    parsed = parse_tool_calls(text)
    msg: dict = {"role": "assistant", "content": parsed.content}
    if parsed.thought:
        msg["reasoning"] = parsed.thought
    if parsed.calls:
        msg["tool_calls"] = [{"id": call_id(turn, j), "name": c.name, "arguments": c.arguments}
                             for j, c in enumerate(parsed.calls)]
    return msg


def normalize_message(msg: Any, field: list | None = None, *, turn: int = 0, require_content: bool = True,
                      strict_calls: bool = False, incoming: bool = False) -> tuple[dict, bool]:
    """One message in the lake form, and whether that lost anything (module docstring). `turn`: the message's
    place among its conversation's assistant messages (for made-up call ids); `incoming`: a tool call beyond the
    parser's bounds is an error (module docstring: bounds). Raises MessageError."""
    out, lossy, _ = _normalize(msg, list(field or []), turn, require_content, strict_calls, incoming)
    return out, lossy


def normalize_messages(msgs: Any, field: list | None = None, *, require_content: bool = True,
                       strict_calls: bool = False, incoming: bool = False) -> tuple[list[dict], bool]:
    """A conversation in the lake form (each message as `normalize_message`, tool messages linked to the calls
    they answer), and whether that lost anything. Raises MessageError naming the first bad field."""
    field = list(field or [])
    if not isinstance(msgs, list):
        raise MessageError("messages must be a list of message objects", field)
    out, lossy, turn = [], False, 0
    pending: list[tuple[dict, bool]] = []  # the last assistant message's calls not yet answered (call, made-up id)
    for i, m in enumerate(msgs):
        nm, changed, made_up = _normalize(m, field + [i], turn, require_content, strict_calls, incoming)
        if nm["role"] == "assistant":
            turn += 1
            pending = [(c, j in made_up) for j, c in enumerate(nm["tool_calls"] or [])]
        elif nm["role"] == "tool":
            changed = _link(nm, pending) or changed
        else:
            pending = []
        out.append(nm)
        lossy = lossy or changed
    return out, lossy


def template_messages(messages: Any) -> list[dict]:
    """A conversation (a list, or its JSON text) in the chat template's play form: role, content (a string),
    tool_calls [{name, arguments: object}], reasoning, and a tool message's tool_call_id; keys only where set.
    What SFT, DPO and the model server render: rows of a lake export (OpenAI's spelling) and files of any
    spelling the normaliser reads. Raises MessageError (a ValueError; text beyond the bounds included)."""
    if isinstance(messages, str):
        try:
            messages = loads_bounded(messages, chars=None)  # a whole conversation: its depth bounded, not its size
        except JsonBoundsError as exc:
            raise MessageError(f"messages: {exc}") from None
    lake, _ = normalize_messages(messages or [], require_content=False)
    return [template_message(m) for m in lake]


def template_message(m: dict) -> dict:
    """One lake-form message in the chat template's play form (`template_messages`)."""
    out: dict = {"role": m["role"], "content": m["content"] or ""}
    if m["tool_calls"]:
        out["tool_calls"] = [{"name": c["name"], "arguments": arguments_object(c["arguments"])}
                             for c in m["tool_calls"]]
    if m["reasoning"]:
        out["reasoning"] = m["reasoning"]
    if m["role"] == "tool" and m["tool_call_id"]:
        out["tool_call_id"] = m["tool_call_id"]
    return out


# ------------------------------------------------------------------------------------------------- internals
def _normalize(msg: Any, field: list, turn: int, require_content: bool, strict_calls: bool, incoming: bool = False
               ) -> tuple[dict, bool, set[int]]:
    """(lake-form message, lossy, indexes of the calls whose id was made up)."""
    if not isinstance(msg, dict):
        raise MessageError("a message must be an object", field)
    given = msg.get("role", msg.get("from"))
    if not isinstance(given, str) or not given:
        raise MessageError("a message needs a string 'role'", field + ["role"], "missing")
    role = ROLE_MAP.get(given)
    if role is None:
        raise MessageError(f"unknown message role {given!r} (expected {', '.join(ROLES)}, or one of "
                           f"{', '.join(r for r in ROLE_MAP if r not in ROLES)})", field + ["role"])
    content_key = "content" if "content" in msg or "value" not in msg else "value"
    if require_content and content_key not in msg and not msg.get("tool_calls"):
        raise MessageError("a message needs 'content'", field + ["content"], "missing")
    content, lossy = _content_text(msg.get(content_key), field + [content_key])
    lossy = lossy or role != given or "from" in msg or content_key == "value"
    reasoning = None
    for key in REASONING_KEYS:
        if msg.get(key) is not None:
            reasoning = msg[key]
            if not isinstance(reasoning, str):
                raise MessageError("reasoning must be a string", field + [key])
            lossy = lossy or key != "reasoning"
            break
    calls, made_up = None, set()
    if msg.get("tool_calls") is not None:
        if not isinstance(msg["tool_calls"], list):
            raise MessageError("tool_calls must be a list", field + ["tool_calls"])
        calls = []
        for j, tc in enumerate(msg["tool_calls"]):
            call, changed, invented = _tool_call(tc, field + ["tool_calls", j], turn, j, incoming)
            calls.append(call)
            lossy = lossy or changed
            if invented:
                made_up.add(j)
        calls = calls or None
    tcid = msg.get("tool_call_id")
    if tcid is not None and not isinstance(tcid, str):
        raise MessageError("tool_call_id must be a string", field + ["tool_call_id"])
    name = msg.get("name")
    if name is not None and not isinstance(name, str):
        raise MessageError("name must be a string", field + ["name"])
    if role == "assistant" and calls is None and reasoning is None and content and any(t in content for t in _MARKUP):
        parsed = parse_tool_calls(content)
        if incoming and parsed.beyond_bounds:
            raise MessageError(parsed.beyond_bounds[0], field + [content_key], "beyond_bounds")
        if strict_calls and parsed.errors:
            raise MessageError(parsed.errors[0], field + [content_key], "bad_tool_call")
        if parsed.calls:
            calls = [{"id": call_id(turn, j), "name": c.name, "arguments": arguments_text(c.arguments)}
                     for j, c in enumerate(parsed.calls)]
            made_up = set(range(len(calls)))
        reasoning = parsed.thought or None
        lossy = lossy or parsed.content != content
        content = parsed.content
    extra = set(msg) - set(MESSAGE_KEYS) - set(REASONING_KEYS) - {"from", "value"}
    return ({"role": role, "content": content, "reasoning": reasoning, "tool_calls": calls, "tool_call_id": tcid,
             "name": name}, lossy or bool(extra), made_up)


def _content_text(content: Any, field: list) -> tuple[str | None, bool]:
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
                raise MessageError("content parts must be strings or objects", field + [j])
        return "".join(parts), True
    raise MessageError("content must be a string, a list of content parts or null", field)


def _tool_call(tc: Any, field: list, turn: int, j: int, incoming: bool = False) -> tuple[dict, bool, bool]:
    """(lake-form call, lossy, whether its id was made up); `incoming`: an `arguments` string beyond the bounds is
    an error."""
    if not isinstance(tc, dict):
        raise MessageError("a tool call must be an object", field)
    fn = tc.get("function")
    if isinstance(fn, dict):
        name, args = fn.get("name"), fn.get("arguments")
        lossy = bool(set(tc) - {"id", "type", "function"}) or tc.get("type") not in (None, "function") \
            or bool(set(fn) - {"name", "arguments"})
    else:
        name, args = tc.get("name"), tc.get("arguments")
        lossy = bool(set(tc) - {"id", "name", "arguments", "type"})
    if not isinstance(name, str) or not name:
        raise MessageError("a tool call needs a non-empty string name", field + ["name"])
    if incoming and isinstance(args, str) and (why := json_bounds_error(args)):
        where = field + (["function", "arguments"] if isinstance(fn, dict) else ["arguments"])
        raise MessageError(f"arguments: {why}", where, "beyond_bounds")
    text = arguments_text(args)
    lossy = lossy or args is None or (isinstance(args, str) and text != args)
    given = tc.get("id")
    if given is not None and not isinstance(given, str):
        given, lossy = str(given), True
    return {"id": given or call_id(turn, j), "name": name, "arguments": text}, lossy, not given


def _link(tool: dict, pending: list[tuple[dict, bool]]) -> bool:
    """Tie a tool message to the call it answers (module docstring: ids); True when it was filled in."""
    if not pending:
        return False
    tcid = tool["tool_call_id"]
    k = next((k for k, (c, _) in enumerate(pending) if c["id"] == tcid), None)
    if k is None:
        if tcid is not None and not pending[0][1]:
            return False  # it names a call of its own: nothing to tie it to by position
        k = 0
    call, made_up = pending.pop(k)
    filled = False
    if tcid is None:
        tool["tool_call_id"], filled = call["id"], True
    elif made_up:
        call["id"] = tcid  # the response carries the real id of a call the text gave none
    if tool["name"] is None:
        tool["name"], filled = call["name"], True
    return filled
