"""Chat requests that cost the server more than their size (issue 38 item 4): a long conversation is joined to its
trajectory in linear time off the event loop, with a bound on messages per request; a tool schema or tool-call
arguments nested too deep are a 400 naming the field (depth bound), not a 500 from the chat template.

Before: an 8,000-message chat (320 KB) held the event loop 45 s (prefix hashing was quadratic: 4,000 messages took
3 s) and /v1/models answered nothing meanwhile; a `parameters` schema nested 300 deep was a plain-text 500
(RecursionError in the chat template).
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from serve_model_helpers import running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig
from serving.record import Conversations

MAX_MESSAGES = 4100


@pytest.fixture(scope="module")
def server(tiny_dir):
    cfg = ServeModelConfig(model="tiny", record="off", threads=1, max_messages=MAX_MESSAGES)
    with running(cfg) as (url, _app):
        yield url


def chat(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "tiny", "max_tokens": 2, **body}, timeout=120)


def conversation(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)]


def nested(depth: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"x": node}}
    return node


@pytest.mark.attack
@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(300)}}]},
     "tools.0.function.parameters"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
                       "name": "f", "arguments": nested(300)}}]}]},
     "messages.1.tool_calls.0.function.arguments"),
])
def test_nesting_too_deep_is_a_400_naming_the_field(server, body, param):
    r = chat(server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "nested deeper than" in err["message"], err
    assert chat(server, {"messages": [{"role": "user", "content": "hi"}]}).status_code == 200


def test_a_schema_nested_within_the_bound_is_served(server):
    r = chat(server, {"messages": [{"role": "user", "content": "hi"}],
                      "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(10)}}]})
    assert r.status_code == 200, r.text


@pytest.mark.attack
def test_more_messages_than_the_bound_is_a_400(server):
    r = chat(server, {"messages": conversation(MAX_MESSAGES + 1)})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages" and f"at most {MAX_MESSAGES}" in err["message"], err


@pytest.mark.attack
def test_joining_a_long_conversation_is_linear():
    """4,000 messages whose every assistant turn is a candidate prefix: joined in well under a second (3 s before),
    and twice the messages take about twice the time, not four times."""
    conv = Conversations()
    conv.remember(conversation(2), "t", 0)  # found last: the search goes from the longest prefix down
    times = {}
    for n in (2000, 4000):
        msgs = conversation(n)
        t0 = time.perf_counter()
        tid, call = conv.join(msgs, None)
        times[n] = time.perf_counter() - t0
        assert (tid, call) == ("t", 1)  # the longest earlier conversation it extends
    assert times[4000] < 0.5, times
    assert times[4000] < 3.5 * times[2000] + 0.02, times


@pytest.mark.attack
def test_the_event_loop_answers_while_a_long_chat_is_joined(server):
    """A 4,000-message chat (within the bound): /v1/models keeps answering within half a second meanwhile."""
    done = threading.Event()
    result: list = []

    def long_chat():
        result.append(chat(server, {"messages": conversation(4000)}))
        done.set()

    t = threading.Thread(target=long_chat)
    t.start()
    worst = 0.0
    while not done.is_set():
        t0 = time.perf_counter()
        assert httpx.get(server + "/v1/models", timeout=10).status_code == 200
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.02)
    t.join()
    assert result[0].status_code in (200, 400), result[0].text  # 400: beyond the tiny model's context
    assert worst < 2.0, worst  # a deadline, not a latency: the loop was held 45 s before; room for a busy machine


@pytest.mark.attack
def test_a_15_mb_chat_is_refused_before_it_is_tokenized(server):
    """Hardening IV item 7: a 15 MB request (within the 16 MiB body bound) was unanswered after 300 s while it was
    hashed and tokenized; more characters than the context can hold are a 400 at once."""
    t0 = time.perf_counter()
    r = chat(server, {"messages": [{"role": "user", "content": "x " * (15 << 19)}]})
    took = time.perf_counter() - t0
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["code"] == "context_length_exceeded" and r.json()["error"]["param"] == "messages"
    assert took < 60, took  # a deadline: seconds here (the body's transfer and parse), minutes before
    assert httpx.get(server + "/v1/models", timeout=10).status_code == 200


BIG = 15 << 20  # 15 MiB of text, within the 16 MiB body bound


@pytest.mark.attack
@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": "a", "reasoning_content": "r " * (BIG // 2)}, {"role": "user", "content": "go"}]},
     "messages"),
    ("/v1/completions", {"prompt": "x " * (BIG // 2)}, "prompt"),
    ("/v1/completions", {"prompt": [5] * (BIG // 3)}, "prompt"),
], ids=["chat-reasoning", "completion-text", "completion-ids"])
def test_a_15_mb_request_of_any_shape_is_refused_within_the_body_deadline(server, path, body, param):
    """Hardening IV item 7, the shapes the first bound missed: 15 MB of an assistant message's reasoning (145 s, past
    the 120 s body deadline, while it was tokenized) and a 15 MB /v1/completions prompt (133 s, the event loop held:
    tokenized as the request was parsed); 5M token ids 10 s. Now a 400 before any tokenizing."""
    t0 = time.perf_counter()
    r = httpx.post(server + path, json={"model": "tiny", "max_tokens": 2, **body}, timeout=150)
    took = time.perf_counter() - t0
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["code"] == "context_length_exceeded" and r.json()["error"]["param"] == param
    assert took < 30, took  # a deadline: about a second here (the body's transfer and parse), minutes before


# -- Hardening IV item 3: a `<tool_call>` nested 5,000 deep in an assistant message (10 KB, within every body
# bound) was a RecursionError in the one tool-call parser: a plain 500 with a traceback ----------------------------
DEEP_CALL = '<tool_call>{"name": "run", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>"
USER = {"role": "user", "content": "list the files"}


@pytest.mark.attack
@pytest.mark.parametrize("message, param", [
    ({"role": "assistant", "content": DEEP_CALL}, "messages.1"),
    ({"role": "assistant", "content": [{"type": "text", "text": "Looking. " + DEEP_CALL}]}, "messages.1"),
    ({"role": "assistant", "content": '<tool_call>{"name": "run", "arguments": "' + "{" * 5000 + '"}</tool_call>'},
     "messages.1"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "run", "arguments": "[" * 5000}}]}, "messages.1.tool_calls.0.function.arguments"),
], ids=["content", "content-parts", "arguments-string-in-content", "arguments-string"])
def test_a_call_nested_5000_deep_in_a_message_is_a_400_naming_the_field(server, message, param):
    r = chat(server, {"messages": [USER, message, {"role": "user", "content": "go on"}]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "nested deeper than" in err["message"], err
    assert chat(server, {"messages": [USER]}).status_code == 200


def test_a_call_within_the_bound_in_a_message_is_served(server):
    within = '<tool_call>{"name": "run", "arguments": {"a": ' + "[" * 20 + "]" * 20 + "}}</tool_call>"
    r = chat(server, {"messages": [USER, {"role": "assistant", "content": within}, {"role": "tool", "content": "ok"}]})
    assert r.status_code == 200, r.text


@pytest.mark.attack
def test_a_reply_nested_5000_deep_is_content_not_a_500():
    """What the model itself writes is never refused: the reply and the conversation recorded keep it as text."""
    from serving.record import recorded_messages, reply_message

    reply = reply_message("Calling. " + DEEP_CALL, 0, tools=True)
    assert "tool_calls" not in reply and reply["content"].endswith("</tool_call>")
    recorded = recorded_messages([USER], reply)
    assert recorded[-1]["content"] == reply["content"] and recorded[-1]["tool_calls"] is None
