"""Hermes tool-call parsing: what models actually emit, and what must become an error, not an exception."""
from __future__ import annotations

from envs import format_tool_call, parse_tool_calls


def test_several_calls_think_and_text():
    text = ("<think>\nlook first\n</think>\nLet me check.\n" + format_tool_call("run", {"command": "ls"}) + "\n"
            + '<tool_call>{"name": "submit", "arguments": "{\\"answer\\": \\"3\\"}"}</tool_call>')
    parsed = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("run", {"command": "ls"}), ("submit", {"answer": "3"})]
    assert parsed.thought == "look first" and parsed.content == "Let me check." and parsed.errors == []
    assert [c.id for c in parsed.calls] == ["call_0", "call_1"]


def test_malformed_blocks_are_errors():
    parsed = parse_tool_calls('<tool_call>{"name": "run", "arguments": {"command": "ls"}}')  # no closing tag
    assert parsed.calls[0].arguments == {"command": "ls"}  # a missing close tag at the end is tolerated
    for bad, why in [('<tool_call>{"name": 3}</tool_call>', "string \"name\""),
                     ('<tool_call>[1, 2]</tool_call>', "string \"name\""),
                     ('<tool_call>{"name": "run", "arguments": [1]}</tool_call>', "must be an object"),
                     ('<tool_call>{"name": "run", "arguments": "nope"}</tool_call>', "not a JSON object"),
                     ("<tool_call>not json</tool_call>", "invalid JSON")]:
        parsed = parse_tool_calls(bad)
        assert parsed.calls == [] and why in parsed.errors[0], bad
    assert parse_tool_calls("just words").calls == [] and parse_tool_calls("just words").errors == []


def test_content_keeps_what_did_not_become_structure():
    """The recorder's assistant content: think blocks and parsed calls removed, a malformed block kept."""
    good = format_tool_call("run", {"command": "ls"})
    parsed = parse_tool_calls("<think>hmm</think>Checking.\n" + good + '\n<tool_call>{"name": 3}</tool_call>')
    assert parsed.content == 'Checking.\n\n<tool_call>{"name": 3}</tool_call>'
    assert [c.name for c in parsed.calls] == ["run"] and not parsed.valid_tool_call  # one block is malformed
    assert parse_tool_calls(good).valid_tool_call and not parse_tool_calls("plain words").valid_tool_call
