"""`lake serve-model` through the real `openai` client against a real uvicorn server on loopback: tool calls parsed
from the model's own output, streaming, the served versions, calls recorded in the lake with their version and
the sampled log-probs the trainer computes, conversations joined into one trajectory, concurrent requests batched."""
from __future__ import annotations

import json
import threading

import httpx
import pytest

from serve_model_helpers import TOOL_PROMPT, TOOLS, client, lake_rows, running, teach_tool_call
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig


@pytest.fixture(scope="module")
def tool_model(tiny_dir, tmp_path_factory):
    return teach_tool_call(tiny_dir, tmp_path_factory.mktemp("tool-model"))


@pytest.fixture(scope="module")
def served(tool_model, tmp_path_factory):
    """One server for the module: the tool-calling model served as --adapter (a full model folder) on tiny."""
    lake = tmp_path_factory.mktemp("served") / "lake"
    cfg = ServeModelConfig(model="tiny", adapter=str(tool_model), lake_root=str(lake), threads=1,
                           batch_window_ms=50)
    with running(cfg) as (url, app):
        yield url, app, lake


def test_chat_with_tools_returns_tool_calls_recorded_with_the_version(served, tool_model):
    url, app, lake = served
    oa = client(url)
    raw = oa.chat.completions.with_raw_response.create(model="tiny", messages=TOOL_PROMPT, tools=TOOLS,
                                                       temperature=0, max_tokens=40)
    r = raw.parse()
    version = f"tiny@{tool_model.name}"
    assert r.model == version and raw.headers["x-lachesis-version"] == version
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "run"
    assert json.loads(call.function.arguments) == {"command": "ls"}
    tid = raw.headers["x-lachesis-trajectory"]
    (row,) = lake_rows(lake, f"trajectory_id = '{tid}'")
    assert row["policy_version"] == version and row["model"] == "tiny"
    v = app.state.serving.engine.resolve(version)
    assert row["metadata"]["adapter_sha256"] == v.sha256 and len(v.sha256) == 64
    assert row["metadata"]["sampling"]["temperature"] == 0 and row["metadata"]["tools"] == TOOLS
    reply = row["messages"][-1]
    assert reply["role"] == "assistant" and reply["tool_calls"][0]["name"] == "run"
    assert json.loads(reply["tool_calls"][0]["arguments"]) == {"command": "ls"}
    assert reply["tool_calls"][0]["id"] == call.id
    n_prompt = row["metadata"]["prompt_tokens"]
    assert row["masks"][:n_prompt] == [-100] * n_prompt and row["masks"][n_prompt:] == row["tokens"][n_prompt:]
    assert r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == len(row["tokens"]) - n_prompt

    # the agent runs the tool and calls again with the conversation so far: the same trajectory, a second row
    follow = TOOL_PROMPT + [choice.message.model_dump(exclude_none=True),
                            {"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"}]
    raw2 = oa.chat.completions.with_raw_response.create(model=version, messages=follow, tools=TOOLS,
                                                        temperature=0, max_tokens=8)
    assert raw2.headers["x-lachesis-trajectory"] == tid
    rows = lake_rows(lake, f"trajectory_id = '{tid}'")
    assert [r["metadata"]["call"] for r in rows] == [0, 1]
    assert [m["role"] for m in rows[1]["messages"]] == ["user", "assistant", "tool", "assistant"]
    from lake import Lake

    with Lake.open(lake).snapshot() as snap:  # the view's latest row per trajectory is the whole conversation
        (cur,) = snap.arrow(f"SELECT messages FROM trajectories_current WHERE trajectory_id = '{tid}'").to_pylist()
    assert len(cur["messages"]) == 4

    # closing the loop: a reward posted for the trajectory id (what `lake serve`'s /v1/rewards appends) makes the
    # served conversation SFT data, with its tools, for the streaming trainer
    Lake.open(lake).append("rewards", [{"trajectory_id": tid, "reward": 1.0, "success": True}])
    with Lake.open(lake).snapshot() as snap:
        (sft,) = snap.arrow(f"SELECT messages, tools, policy_version FROM sft WHERE trajectory_id = '{tid}'").to_pylist()
    assert [m["role"] for m in sft["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert sft["messages"][1]["tool_calls"][0]["function"]["name"] == "run" and sft["policy_version"] == version
    assert "run" in str(sft["tools"])


def test_session_header_joins_calls_and_models_lists_the_version(served, tool_model):
    url, _, lake = served
    oa = client(url)
    ids = set()
    for text in ("first", "an unrelated second message"):
        raw = oa.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": text}], max_tokens=3, temperature=0,
            extra_headers={"X-Lachesis-Session": "agent-session-7"})
        ids.add(raw.headers["x-lachesis-trajectory"])
    assert len(ids) == 1
    assert [r["metadata"]["call"] for r in lake_rows(lake, f"trajectory_id = '{ids.pop()}'")] == [0, 1]
    models = oa.models.list().data
    assert [m.id for m in models] == [f"tiny@{tool_model.name}"]


def test_streaming_matches_the_plain_answer_and_streams_tool_calls(served):
    url, _, _ = served
    oa = client(url)
    plain = oa.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=12,
                                       temperature=0)
    chunks = list(oa.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                             max_tokens=12, temperature=0, stream=True,
                                             stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    tools = list(oa.chat.completions.create(model="tiny", messages=TOOL_PROMPT, tools=TOOLS, temperature=0,
                                            max_tokens=40, stream=True))
    deltas = [tc for c in tools for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas] == ["run"] and json.loads(deltas[0].function.arguments) == {"command": "ls"}
    assert tools[-1].choices[0].finish_reason == "tool_calls"
    assert "<tool_call>" not in "".join(c.choices[0].delta.content or "" for c in tools)
    # with tools, whatever the reply (here a malformed tool call block, which stays content), the stream's content
    # and tool calls are the plain answer's
    odd = [{"role": "user", "content": "hello there"}]
    plain = oa.chat.completions.create(model="tiny", messages=odd, tools=TOOLS, temperature=0, max_tokens=30)
    chunks = list(oa.chat.completions.create(model="tiny", messages=odd, tools=TOOLS, temperature=0, max_tokens=30,
                                             stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == (plain.choices[0].message.content or "")
    streamed_calls = [tc.function.name for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert streamed_calls == [tc.function.name for tc in (plain.choices[0].message.tool_calls or [])]
    # on the wire: server-sent events in OpenAI's chunk format, ending with [DONE]
    with httpx.stream("POST", url + "/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    assert json.loads(lines[0][6:])["object"] == "chat.completion.chunk"


def test_recorded_logprobs_are_the_trainers(served, tool_model):
    """Sampled at temperature 0.7 (seeded): the recorded log-probs and the response's are the trainer's float32
    log-probs of the same tokens (sft.logits_at, the head SFT's loss and GRPO's token log-probs use, over the
    recorded token ids) within 1e-4."""
    import torch

    from trainers.modeling.models import load_model
    from trainers.modeling.forward import logits_at

    url, _, lake = served
    oa = client(url)
    raw = oa.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "what is in the folder?"}], max_tokens=16,
        temperature=0.7, seed=3, logprobs=True, top_logprobs=3)
    r = raw.parse()
    (row,) = lake_rows(lake, f"trajectory_id = '{raw.headers['x-lachesis-trajectory']}'")
    ids = torch.tensor([row["tokens"]])
    keep = torch.tensor([[m != -100 for m in row["masks"][1:]]])
    model = load_model(str(tool_model), device=torch.device("cpu")).eval()
    with torch.no_grad():
        logits = logits_at(model, keep, input_ids=ids, attention_mask=torch.ones_like(ids)).float()
    want = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:][keep].unsqueeze(-1)).squeeze(-1)
    n = row["metadata"]["prompt_tokens"]
    got = torch.tensor(row["inference_logprobs"][n:], dtype=torch.float32)
    assert len(got) == r.usage.completion_tokens > 0
    assert torch.allclose(got, want.float(), atol=1e-4), (got - want).abs().max()
    served_lp = torch.tensor([t.logprob for t in r.choices[0].logprobs.content])
    assert torch.allclose(served_lp, want.float(), atol=1e-4)
    assert all(len(t.top_logprobs) == 3 for t in r.choices[0].logprobs.content)
    assert row["inference_logprobs"][:n] == [1.0] * n  # Atropos' convention on the prompt


def test_concurrent_requests_are_batched_and_completions_work(served):
    url, app, _ = served
    eng = app.state.serving.engine
    before = (eng.batches, eng.batched_requests)
    out, errors = [], []

    def ask(i):
        try:
            c = client(url).completions.create(model="tiny", prompt=f"file {i} ", max_tokens=4, temperature=0,
                                               logprobs=2)
            out.append(c)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 8
    assert all(c.object == "text_completion" and len(c.choices[0].logprobs.token_logprobs) == c.usage.completion_tokens
               for c in out)
    batches, requests = eng.batches - before[0], eng.batched_requests - before[1]
    assert requests == 8 and batches < 8, (batches, requests)  # several requests shared a generate call


def test_streamed_completion_is_the_plain_one_and_is_recorded(served):
    """/v1/completions with stream: the real client's chunks join to the plain answer's text, the last names the
    finish reason, and the call lands in the lake; stream with logprobs is a 400 naming the field."""
    import openai

    url, _, lake = served
    oa = client(url)
    prompt = "<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n"  # the taught reply: a tool call
    plain = oa.completions.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0)
    raw = oa.completions.with_raw_response.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0,
                                                  stream=True)
    chunks = list(raw.parse())
    assert "".join(c.choices[0].text for c in chunks) == plain.choices[0].text != ""
    assert [c.choices[0].finish_reason for c in chunks][-1] == plain.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    # a piece per decoded token as it is chosen (a token may decode to nothing until its neighbour comes)
    assert 2 <= len(chunks) - 1 <= plain.usage.completion_tokens, (len(chunks), plain.usage)
    tid = raw.headers["x-lachesis-trajectory"]
    rows = [r for r in lake_rows(lake) if r["trajectory_id"] == tid]
    assert len(rows) == 1 and rows[0]["messages"][-1]["content"] == plain.choices[0].text
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        list(oa.completions.create(model="tiny", prompt="ls ", max_tokens=3, logprobs=1, stream=True))


def test_a_continued_conversation_reuses_its_kv_and_answers_the_same(served, tool_model):
    """The second call of a session starts from the KV its first call left (trainers.generation.generate.TurnCache); its greedy
    answer and log-probs equal those of the same messages computed from scratch (another session)."""
    url, app, _ = served
    oa = client(url)
    head = {"X-Lachesis-Session": "kv-a"}
    r1 = oa.chat.completions.with_raw_response.create(model="tiny", messages=TOOL_PROMPT, tools=TOOLS, temperature=0,
                                                      max_tokens=40, extra_headers=head)
    tid = r1.headers["x-lachesis-trajectory"]
    cache = app.state.serving.engine._turns[f"tiny@{tool_model.name}"]
    kept = len(cache.rows[tid].ids)
    msg = r1.parse().choices[0].message
    convo = TOOL_PROMPT + [msg.model_dump(exclude_none=True),
                           {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "a.txt"}]
    answers = [oa.chat.completions.create(model="tiny", messages=convo, tools=TOOLS, temperature=0, max_tokens=12,
                                          logprobs=True, extra_headers={"X-Lachesis-Session": s})
               for s in ("kv-a", "kv-b")]
    assert len(cache.rows[tid].ids) > kept  # the conversation's KV grew with the second call
    (a, b) = [r.choices[0] for r in answers]
    assert a.message.content == b.message.content and a.finish_reason == b.finish_reason
    lp = [[t.logprob for t in c.logprobs.content] for c in (a, b)]
    assert max(abs(x - y) for x, y in zip(*lp)) < 1e-4


def test_a_batch_stays_within_max_batch_tokens(tiny_dir):
    """Six concurrent requests of 30 + 10 tokens under --max-batch-tokens 80: two per generate call, none lost."""
    import asyncio

    from serving.app import load_engine
    from trainers.generation.generate import Sampling

    engine, _ = load_engine(ServeModelConfig(model="tiny", record="off", threads=1, max_batch_tokens=80,
                                             batch_window_ms=200))
    engine.start()
    try:
        v = engine.versions()[-1]

        async def ask_all():
            return await asyncio.gather(*[engine.generate(list(range(5 + i, 35 + i)), Sampling(max_new_tokens=10), v)
                                          for i in range(6)])

        gens = asyncio.run(ask_all())
    finally:
        engine.close()
    assert len(gens) == 6 and all(0 < len(g.token_ids) <= 10 for g in gens)
    assert (engine.batches, engine.batched_requests) == (3, 6)


def test_a_restarted_server_keeps_joining_a_conversation(tiny_dir, tmp_path):
    """Prefix matching starts from the lake's recorded calls: the second call of a conversation, answered by a new
    server process on the same lake, continues the first call's trajectory."""
    cfg = ServeModelConfig(model="tiny", lake_root=str(tmp_path / "lake"), threads=1)
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    with running(cfg) as (url, _):
        raw = client(url).chat.completions.with_raw_response.create(model="tiny", messages=first, max_tokens=4,
                                                                    temperature=0)
    tid, reply = raw.headers["x-lachesis-trajectory"], raw.parse().choices[0].message
    with running(cfg) as (url, _):
        again = client(url).chat.completions.with_raw_response.create(
            model="tiny", messages=first + [{"role": "assistant", "content": reply.content},
                                            {"role": "user", "content": "and?"}], max_tokens=4, temperature=0)
    assert again.headers["x-lachesis-trajectory"] == tid
    assert [r["metadata"]["call"] for r in lake_rows(tmp_path / "lake", f"trajectory_id = '{tid}'")] == [0, 1]


def test_a_first_call_asked_again_joins_its_conversation(served):
    """Hermes' retry pattern (issue 37, item 5): a reply with a tool call Hermes rejects (an invalid tool call) is
    not sent back; Hermes asks call 0 again with the same messages, then goes on with the retry's reply. One
    conversation, one trajectory: rows of calls 0, 0 (the retry) and 1. The same first messages from another
    client, or after the conversation went on, begin a new trajectory."""
    url, _, lake = served
    oa = client(url)
    hermes = {"User-Agent": "hermes-retry-test/1"}

    def ask(messages, head=hermes):
        raw = oa.chat.completions.with_raw_response.create(model="tiny", messages=messages, tools=TOOLS,
                                                           temperature=0, max_tokens=40, extra_headers=head)
        return raw.headers["x-lachesis-trajectory"], raw.parse().choices[0]

    tid, first = ask(TOOL_PROMPT)
    assert first.finish_reason == "tool_calls"  # the turn is open: Hermes must answer the call or ask again
    other_client, _ = ask(TOOL_PROMPT, {"User-Agent": "another-agent/2"})
    again, retry = ask(TOOL_PROMPT)  # the retry of call 0
    assert again == tid != other_client
    call = retry.message.tool_calls[0]
    went_on, _ = ask(TOOL_PROMPT + [retry.message.model_dump(exclude_none=True),
                                    {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}])
    assert went_on == tid
    rows = lake_rows(lake, f"trajectory_id = '{tid}'")
    assert [r["metadata"]["call"] for r in rows] == [0, 0, 1]
    assert [m["role"] for m in rows[-1]["messages"]] == ["user", "assistant", "tool", "assistant"]
    new, _ = ask(TOOL_PROMPT)  # the conversation went on: the same first messages are a new conversation
    assert new not in (tid, other_client)
