"""One model of a message and a tool call (transcript/messages.py): the same replies, written as a Hermes ShareGPT record,
an Atropos group, an environment's actions and a served conversation, become the same lake messages and tool calls,
read back from one real lake."""
from __future__ import annotations

import json

import orjson
import pytest

import envs
from ingest import atropos as A
from ingest.formats import to_records
from lake import Lake
from lake.schemas import MESSAGE, PAYLOADS
from serving import protocol as P
from serving.record import call_record, recorded_messages, reply_message
from trainers.modeling.token_columns import MASKED, NOT_SAMPLED
from transcript.messages import (MESSAGE_KEYS, TOOL_CALL_KEYS, MessageError, normalize_messages, template_messages)
from transcript.toolcalls import parse_tool_calls
from transcript.trajectory_row import COLUMNS, trajectory_row

# what models write: Hermes' tags around a call, a scratchpad and two calls (one with OpenAI's JSON-string
# arguments), a call the model did not close, a thought it did not close before calling, and one it never closed
REPLIES = [
    '<think>\nlook first\n</think>\nLet me check.\n<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n'
    '</tool_call>',
    '<REASONING_SCRATCHPAD>two at once</REASONING_SCRATCHPAD>\n<tool_call>\n{"name": "run", "arguments": '
    '{"command": "pwd", "timeout": 5}}\n</tool_call>\n<tool_call>{"name": "run", "arguments": '
    '"{\\"command\\": \\"echo hi\\"}"}</tool_call>',
    '<tool_call>\n{"name": "run", "arguments": {"command": "echo unclosed"}}',
    '<think>\nnow count\n<tool_call>\n{"name": "run", "arguments": {"command": "echo 3"}}\n</tool_call>',
    '<think>\nthat is all I need',
]
VERSION = {"name": "tiny@v1", "sha256": "0" * 64, "path": "/nowhere", "step": 1}


def _episode():
    """The replies as an environment's actions: what it parsed and ran each step, and the episode's record."""
    env = envs.make("bash_exec_env", split="test", max_steps=len(REPLIES) + 1)
    try:
        obs, info = env.reset(seed=0, options={"task_id": "bash_exec_env:test:00000"})
        rec = envs.EpisodeRecorder(obs, info)
        executed = []
        for text in REPLIES:
            out = env.step(text)
            executed.append(out[-1]["tool_calls"])
            rec.add_step(text, *out)
        assert rec.done and not rec.cut  # the last reply holds no call: the environment ended the episode
        return executed, info["tools"], rec.record(model="m", policy_version="v", source="test")
    finally:
        env.close()


def _turns(row: dict) -> tuple[list[dict], list[list[dict]]]:
    """(system and user messages, per reply the tool messages that answered it) of the episode's record."""
    head, answers = row["messages"][:2], []
    for m in row["messages"][2:]:
        if m["role"] == "assistant":
            answers.append([])
        else:
            answers[-1].append(m)
    return head, answers


def _hermes(row: dict) -> dict:
    (system, user), answers = _turns(row)
    conv = [{"from": "system", "value": system["content"]}, {"from": "human", "value": user["content"]}]
    for text, tools in zip(REPLIES, answers):
        conv.append({"from": "gpt", "value": text})
        if tools:
            conv.append({"from": "tool", "value": "\n".join(
                "<tool_response>\n" + json.dumps({"name": t["name"], "content": t["content"]}) + "\n</tool_response>"
                for t in tools)})
    return {"conversations": conv, "model": "hermes-3", "completed": True}


def _atropos(row: dict) -> dict:
    """An Atropos env's group: OpenAI messages with each reply's raw text, tool results without ids."""
    (system, user), answers = _turns(row)
    msgs = [{"role": "system", "content": system["content"]}, {"role": "user", "content": user["content"]}]
    for text, tools in zip(REPLIES, answers):
        msgs.append({"role": "assistant", "content": text})
        msgs += [{"role": "tool", "content": t["content"]} for t in tools]
    return {"tokens": [[1, 2, 3]], "masks": [[MASKED, 2, 3]], "scores": [1.0], "messages": [msgs]}


def _served(row: dict, tools: list[dict]) -> dict:
    """The replies as a model server's answers to an OpenAI client that sends the conversation back each call: the
    row of the last call, which holds the whole conversation."""
    (system, user), answers = _turns(row)
    sent = [{"role": "system", "content": system["content"]}, {"role": "user", "content": user["content"]}]
    for call, (text, results) in enumerate(zip(REPLIES, answers)):
        req = P.ChatRequest.model_validate({"model": "tiny", "messages": sent, "tools": tools})
        _, _, lake_messages = P.chat_inputs(req)
        reply = reply_message(text, call, tools=True)
        record = call_record(trajectory_id="served", label="tiny", version=VERSION,
                             messages=recorded_messages(lake_messages, reply), prompt_ids=[5, 6], token_ids=[7],
                             logprobs=[-0.5], metadata={"call": call})
        calls = P.openai_tool_calls(reply.get("tool_calls") or [])  # the reply as the client got it, sent back
        sent.append({"role": "assistant", "content": reply["content"] or None, "tool_calls": calls or None,
                     "reasoning_content": reply.get("reasoning")})
        sent += [{"role": "tool", "tool_call_id": t["tool_call_id"], "content": t["content"]} for t in results]
    return record


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The four routes' rows in one real lake, read back: {route: row}."""
    executed, tools, episode = _episode()
    group = _atropos(episode)
    rows = {"env": {**episode, "trajectory_id": "env"},
            "hermes": {**to_records(_hermes(episode), "hermes")[0], "trajectory_id": "hermes"},
            "atropos": {**to_records(group, "atropos", line=1)[0], "trajectory_id": "atropos"},
            "served": _served(episode, tools)}
    lake = Lake.init(tmp_path_factory.mktemp("messages") / "lake")
    lake.append("trajectories", list(rows.values()))
    with lake.snapshot() as snap:
        back = snap.arrow("SELECT * FROM trajectories").to_pylist()
    return executed, group, {r["trajectory_id"]: r for r in back}


def test_the_same_replies_are_the_same_messages_by_every_route(stored):
    executed, _, rows = stored
    want = rows["env"]["messages"]
    for route in ("hermes", "atropos", "served"):
        assert rows[route]["messages"] == want, route
    assistants = [m for m in want if m["role"] == "assistant"]
    assert [m["reasoning"] for m in assistants] == ["look first", "two at once", None, "now count",
                                                    "that is all I need"]
    assert [m["content"] for m in assistants] == ["Let me check.", "", "", "", ""]
    calls = [[(c["id"], c["name"], json.loads(c["arguments"])) for c in m["tool_calls"] or []] for m in assistants]
    assert calls == [[("call_0_0", "run", {"command": "ls"})],
                     [("call_1_0", "run", {"command": "pwd", "timeout": 5}),
                      ("call_1_1", "run", {"command": "echo hi"})],
                     [("call_2_0", "run", {"command": "echo unclosed"})],
                     [("call_3_0", "run", {"command": "echo 3"})],
                     []]
    # arguments as the model wrote them, compact: one text whichever route stored them
    assert assistants[1]["tool_calls"][0]["arguments"] == '{"command":"pwd","timeout":5}'
    # what the environment ran is what every route stored
    assert [[(c["name"], c["arguments"]) for c in step] for step in executed] == \
        [[(n, a) for _, n, a in turn] for turn in calls]
    tools = [m for m in want if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call_0_0", "call_1_0", "call_1_1", "call_2_0", "call_3_0"]
    assert {t["name"] for t in tools} == {"run"} and tools[2]["content"] == "hi"


def test_a_split_atropos_group_is_still_served_as_posted(stored):
    """Splitting an Atropos reply changes the lake's messages, so the group keeps the posted ones in raw: /batch
    serves the group exactly as it came."""
    _, group, rows = stored
    assert A.rows_to_group([rows["atropos"]])["messages"] == group["messages"]


def test_the_served_row_keeps_atropos_token_conventions(stored):
    row = stored[2]["served"]
    assert row["tokens"] == [5, 6, 7] and row["masks"] == [MASKED, MASKED, 7]
    assert row["inference_logprobs"] == [NOT_SAMPLED, NOT_SAMPLED, -0.5]


def test_the_parser_reads_what_either_parser_read():
    unclosed_think = parse_tool_calls("<think>\ncut off here")
    assert (unclosed_think.thought, unclosed_think.content, unclosed_think.calls) == ("cut off here", "", [])
    scratch = parse_tool_calls("<REASONING_SCRATCHPAD>plan</REASONING_SCRATCHPAD>ok")
    assert (scratch.thought, scratch.content) == ("plan", "ok")
    inside = parse_tool_calls('<think>maybe <tool_call>{"name": "run"}</tool_call></think>no')
    assert inside.calls == [] and inside.thought.startswith("maybe") and inside.content == "no"
    plain = "  a plain reply\n"
    assert parse_tool_calls(plain).content == plain  # nothing taken out: the text as written


def test_one_normaliser_one_role_map_and_it_is_idempotent():
    msgs = [{"from": "human", "value": "hi"}, {"role": "developer", "content": "be brief"},
            {"role": "gpt", "content": [{"type": "text", "text": "<think>x</think>ok"}]},
            {"role": "observation", "content": "done"}]
    lake, lossy = normalize_messages(msgs)
    assert [m["role"] for m in lake] == ["user", "system", "assistant", "tool"] and lossy
    assert (lake[2]["content"], lake[2]["reasoning"]) == ("ok", "x")
    assert normalize_messages(lake) == (lake, False)  # what ingest stored reads back unchanged
    # an export's OpenAI spelling of stored messages renders as the stored messages do
    stored = normalize_messages([{"role": "user", "content": "list"}, {"role": "assistant", "content": "",
                                 "tool_calls": [{"id": "c", "name": "run", "arguments": '{"command":"ls"}'}]}])[0]
    export = [{"role": "user", "content": "list"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "run", "arguments": '{"command": "ls"}'}}]}]
    assert template_messages(export) == template_messages(stored) == [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "run", "arguments": {"command": "ls"}}]}]
    with pytest.raises(MessageError) as bad:
        normalize_messages([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])
    assert bad.value.field == [1, "role"] and "unknown message role 'wizard'" in str(bad.value)


def test_the_model_fills_the_lakes_struct_and_the_row_its_columns():
    assert MESSAGE_KEYS == tuple(MESSAGE.field(i).name for i in range(MESSAGE.num_fields))
    call = MESSAGE.field("tool_calls").type.value_type
    assert TOOL_CALL_KEYS == tuple(call.field(i).name for i in range(call.num_fields))
    assert COLUMNS == tuple(f.name for f in PAYLOADS["trajectories"])
    with pytest.raises(TypeError, match="rewards"):
        trajectory_row(trajectory_id="t", messages=[], rewards=1.0)
    assert orjson.loads(orjson.dumps(trajectory_row(trajectory_id="t", messages=[], reward=1.0))) == {
        "trajectory_id": "t", "messages": [], "reward": 1.0}
