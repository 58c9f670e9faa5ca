"""Hermes tool-call parsing: what models actually emit, and what must become an error, not an exception."""
from __future__ import annotations

import json

from transcript.toolcalls import format_tool_call, parse_tool_calls


def test_several_calls_think_and_text():
    text = ("<think>\nlook first\n</think>\nLet me check.\n" + format_tool_call("run", {"command": "ls"}) + "\n"
            + '<tool_call>{"name": "submit", "arguments": "{\\"answer\\": \\"3\\"}"}</tool_call>')
    parsed = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("run", {"command": "ls"}), ("submit", {"answer": "3"})]
    assert parsed.thought == "look first" and parsed.content == "Let me check." and parsed.errors == []
    assert [c.id for c in parsed.calls] == ["call_0", "call_1"]


def test_the_format_is_one_interface_with_hermes_as_the_default():
    """parse_tool_calls and format_tool_call go through DEFAULT_FORMAT (Hermes); another family's format is a class
    with the same three members, and the message model splits a reply only where the format's markup is."""
    from transcript.messages import normalize_message
    from transcript.toolcalls import DEFAULT_FORMAT, HERMES, ParsedAction, ToolCall, ToolCallFormat

    assert DEFAULT_FORMAT is HERMES and HERMES.markup == ("<think>", "<REASONING_SCRATCHPAD>", "<tool_call>")
    text = format_tool_call("run", {"command": "ls"})
    assert text == HERMES.format("run", {"command": "ls"}) and parse_tool_calls(text) == HERMES.parse(text)

    class Bracketed:  # a made-up family: [CALL] name {json} [/CALL]
        markup = ("[CALL]",)

        def parse(self, text: str) -> ParsedAction:
            name, _, args = text.removeprefix("[CALL] ").removesuffix(" [/CALL]").partition(" ")
            return ParsedAction([ToolCall(name, json.loads(args), "call_0")])

        def format(self, name: str, arguments: dict) -> str:
            return f"[CALL] {name} {json.dumps(arguments)} [/CALL]"

    other: ToolCallFormat = Bracketed()
    assert other.parse(other.format("run", {"command": "ls"})).calls == [ToolCall("run", {"command": "ls"}, "call_0")]
    plain, _ = normalize_message({"role": "assistant", "content": other.format("run", {})})
    assert plain["tool_calls"] is None  # not Hermes markup: plain content under the default format


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


# -- Hardening IV item 3: JSON nested 5,000 deep in a call was a RecursionError out of the parser (a 500 in both
# servers, a traceback from `lake import`, the end of a rollout); now an error like any malformed block ----------
import time  # noqa: E402

import pytest  # noqa: E402

import envs  # noqa: E402
from transcript.messages import arguments_object, arguments_text, assistant_message, template_messages  # noqa: E402
from transcript.toolcalls import MAX_JSON_CHARS, MAX_JSON_DEPTH, json_bounds_error, loads_bounded  # noqa: E402

DEEP = 5000


def call_with(arguments: str) -> str:
    return '<tool_call>{"name": "run", "arguments": ' + arguments + "}</tool_call>"


DEEP_CALLS = {
    "arrays": call_with("[" * DEEP + "]" * DEEP),
    "arrays-unclosed": call_with("[" * DEEP),
    "objects": call_with("{\"a\":" * DEEP + "1" + "}" * DEEP),
    "arguments-string": call_with('"' + "[" * DEEP + "]" * DEEP + '"'),
    "whole-block": "<tool_call>" + "[" * DEEP + "]" * DEEP + "</tool_call>",
    "after-a-think": "<think>plan</think>" + call_with("[" * DEEP),
}


@pytest.mark.attack
@pytest.mark.parametrize("text", DEEP_CALLS.values(), ids=DEEP_CALLS.keys())
def test_a_call_nested_5000_deep_is_an_error_not_a_recursion(text):
    assert len(text) < 40_000  # 10-35 KB: small enough for every body-size and body-depth check
    parsed = parse_tool_calls(text)
    assert parsed.calls == [] and len(parsed.errors) == 1
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in parsed.errors[0]
    assert parsed.beyond_bounds == parsed.errors and "<tool_call>" in parsed.content  # the text is kept


@pytest.mark.attack
def test_a_call_over_the_size_bound_is_an_error():
    parsed = parse_tool_calls(call_with('{"content": "' + "x" * MAX_JSON_CHARS + '"}'))
    assert parsed.calls == [] and "over the bound" in parsed.errors[0] and parsed.beyond_bounds == parsed.errors


@pytest.mark.attack
def test_an_integer_python_will_not_read_is_an_error():
    parsed = parse_tool_calls(call_with('{"n": ' + "1" * 5000 + "}"))  # a ValueError of its own, not a decode error
    assert parsed.calls == [] and "invalid JSON" in parsed.errors[0]


def test_the_depth_bound_counts_levels_outside_strings():
    within = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_bounds_error(within) == "" and loads_bounded(within) is not None
    assert "deeper than" in json_bounds_error("[" + within + "]")
    quoted = '{"a": "' + "[{" * DEEP + '\\"]"}'  # brackets and an escaped quote inside a string count for nothing
    assert json_bounds_error(quoted) == "" and loads_bounded(quoted)["a"].startswith("[{")
    ok = parse_tool_calls(call_with('{"a": ' + "[" * 60 + "]" * 60 + "}"))
    assert ok.calls and ok.errors == []


@pytest.mark.attack
def test_readers_of_arguments_never_recurse():
    """The message model's readers of arguments text (the lake's, a file's): beyond the bounds they stay text."""
    deep = "[" * DEEP + "]" * DEEP
    assert arguments_text(deep) == deep and arguments_object(deep) == deep
    assert assistant_message(call_with(deep), 0)["content"].startswith("<tool_call>")
    with pytest.raises(ValueError, match="nested deeper"):
        template_messages('[{"role": "user", "content": ' + "[" * DEEP + "]" * DEEP + "}]")


@pytest.mark.attack
def test_unclosed_reasoning_tags_take_linear_time():
    """A regex retried from every unclosed <think> took 74 s on 224 KB of them; a reply of 1 MB parses at once."""
    for text in ("<think>" * 150_000, "<REASONING_SCRATCHPAD>" * 50_000 + "<think>" * 50_000):
        start = time.perf_counter()
        parsed = parse_tool_calls(text)
        assert time.perf_counter() - start < 2 and parsed.calls == [] and parsed.errors == []
    parsed = parse_tool_calls("<think>a</think><REASONING_SCRATCHPAD>b</REASONING_SCRATCHPAD><think>c" + call_with("{}"))
    assert parsed.thought == "a\nb\nc" and [c.name for c in parsed.calls] == ["run"]


ENVS = ["bash_exec_env", "python_debug_env", "git_repo_env"]


@pytest.mark.attack
@pytest.mark.parametrize("name", ENVS)
def test_a_deep_call_is_an_observation_and_the_episode_goes_on(name):
    env = envs.make(name, split="test")
    try:
        env.reset(options={"index": 0})
        obs, _, terminated, truncated, info = env.step("Let me look.\n" + DEEP_CALLS["arrays"])
        assert "nested deeper than 64 levels" in obs and obs.startswith("error: tool call 1")
        assert not terminated and not truncated and info["parse_errors"] and info["tool_calls"] == []
        first = env.unwrapped.task.solution[0]  # the expert's first call: the episode goes on from where it was
        obs, _, _, _, info = env.step(format_tool_call(first["name"], first["arguments"]))
        assert info["parse_errors"] == [] and [c["name"] for c in info["tool_calls"]] == [first["name"]]
        assert info["step"] == 2 and not obs.startswith("error")
    finally:
        env.close()
