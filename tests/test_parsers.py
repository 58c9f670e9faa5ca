"""Pure parsers: Hermes ShareGPT, Atropos groups (round trip through a real lake), formats, SKILL.md, packing."""
import gzip
import json
import random

import orjson
import pytest

from edge.errors import BadInput
from edge.guards import gunzip_bounded
from ingest import atropos as A
from ingest.atropos_queue import AtroposQueue, GroupQueued, Registered, Started
from ingest.formats import detect_record, parse_body, parse_file
from ingest.groups import ParsedGroup, from_model, parse_fast, parse_group
from ingest.hermes import hermes_to_record
from ingest.skills import parse_skill

SYSTEM = ("You are a function calling AI model. <tools>\n[{\"name\": \"terminal\", \"description\": \"x\", "
          "\"parameters\": {}, \"required\": null}, {\"name\": \"read_file\"}]\n</tools>")


def batch_record():
    return {
        "prompt_index": 0,
        "conversations": [
            {"from": "system", "value": SYSTEM},
            {"from": "human", "value": "Why does tests/test_parse.py fail?"},
            {"from": "gpt", "value": "<think>\nRun the test first.\n</think>\nLet me check.\n<tool_call>\n"
                                     "{\"name\": \"terminal\", \"arguments\": {\"command\": \"pytest -x\"}}\n</tool_call>\n"
                                     "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>"},
            {"from": "tool", "value": "<tool_response>\n{\"tool_call_id\": \"call_7\", \"name\": \"terminal\", "
                                      "\"content\": {\"output\": \"E KeyError\", \"exit_code\": 1, \"error\": null}}\n"
                                      "</tool_response>\n<tool_response>\n{\"tool_call_id\": \"call_8\", "
                                      "\"name\": \"read_file\", \"content\": \"def f(): pass\"}\n</tool_response>"},
            {"from": "gpt", "value": "<think>\n</think>\nThe parser assumes a `date` key."},
        ],
        "metadata": {"batch_num": 0, "timestamp": "2026-05-02T10:00:00.000000", "model": "hermes-3"},
        "completed": True, "partial": False, "api_calls": 2, "toolsets_used": ["terminal"],
        "tool_stats": {"terminal": {"count": 1, "success": 1, "failure": 0}},
        "tool_error_counts": {"terminal": 0},
    }


def test_hermes_batch_record_structured():
    rec = hermes_to_record(batch_record())
    m = rec["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    a = m[2]
    assert a["reasoning"] == "Run the test first."
    assert a["content"] == "Let me check."
    assert [t["name"] for t in a["tool_calls"]] == ["terminal", "read_file"]
    assert json.loads(a["tool_calls"][0]["arguments"]) == {"command": "pytest -x"}
    # tool results matched by position, the real call ids adopted
    assert [t["id"] for t in a["tool_calls"]] == ["call_7", "call_8"]
    assert m[3]["tool_call_id"] == "call_7" and m[3]["name"] == "terminal"
    assert json.loads(m[3]["content"])["exit_code"] == 1
    assert m[4]["content"] == "def f(): pass" and m[4]["name"] == "read_file"
    assert m[5]["reasoning"] is None and m[5]["content"].startswith("The parser")
    assert rec["model"] == "hermes-3"
    assert rec["metadata"]["format"] == "hermes.batch"
    assert rec["metadata"]["tools"] == ["terminal", "read_file"]
    assert rec["raw"] == batch_record()
    assert rec["occurred_at"].startswith("2026-05-02T10:00:00")
    assert len(rec["steps"]) == 2 and rec["steps"][-1]["done"] is True


def test_hermes_cli_shape_and_stable_ids():
    cli = {"conversations": [{"from": "human", "value": "hi"},
                             {"from": "gpt", "value": "<think>\nsay hi\n</think>\nHello"}],
           "timestamp": "2026-05-02T10:00:00", "model": "m", "completed": False}
    r1, r2 = hermes_to_record(cli), hermes_to_record(json.loads(json.dumps(cli)))
    assert r1["metadata"]["format"] == "hermes.cli"
    assert r1["trajectory_id"] == r2["trajectory_id"]
    assert r1["messages"][1]["reasoning"] == "say hi" and r1["messages"][1]["content"] == "Hello"
    cli2 = dict(cli, model="other")
    assert hermes_to_record(cli2)["trajectory_id"] != r1["trajectory_id"]


def test_hermes_tool_response_without_parent_and_scratchpad():
    rec = {"conversations": [{"from": "human", "value": "q"},
                             {"from": "gpt", "value": "<REASONING_SCRATCHPAD>plan</REASONING_SCRATCHPAD>ok"},
                             {"from": "tool", "value": "plain output"}]}
    m = hermes_to_record(rec)["messages"]
    assert m[1]["reasoning"] == "plan" and m[1]["content"] == "ok"
    assert m[2]["role"] == "tool" and m[2]["content"] == "plain output"


@pytest.mark.parametrize("bad,field", [
    ({"conversations": "x"}, "conversations"),
    ({"conversations": []}, "conversations"),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "conversations.0.from"),
    ({"conversations": [{"from": "gpt", "value": 3}]}, "conversations.0.value"),
    ({"conversations": [{"from": "gpt", "value": "<tool_call>\nnot json\n</tool_call>"}]}, "conversations.0.value"),
])
def test_hermes_bad(bad, field):
    with pytest.raises(BadInput) as ei:
        hermes_to_record(bad)
    assert ei.value.field_str() == field


def group(rng, n=4, **kw):
    g = {"tokens": [[rng.randrange(1, 999) for _ in range(rng.randint(3, 9))] for _ in range(n)],
         "scores": [rng.choice([1.0, 0.0, -1.0]) for _ in range(n)], "env_id": 0}
    g["masks"] = [[-100] + t[1:] for t in g["tokens"]]
    g["inference_logprobs"] = [[1.0] + [-rng.random() for _ in t[1:]] for t in g["tokens"]]
    g["messages"] = [[{"role": "user", "content": "q"},
                      {"role": "assistant", "content": "a", "tool_calls": [
                          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
                     for _ in range(n)]
    g.update(kw)
    return g


def test_atropos_group_round_trip_through_lake(tmp_path):
    from lake import Lake

    rng = random.Random(7)
    lk = Lake.init(tmp_path / "lake")
    originals = [
        group(rng),
        group(rng, advantages=[], ref_logprobs=[], images=[], group_overrides={}, overrides=[{"temperature": 1.0}] * 4),
        group(rng, n=2, generation_params={"temperature": 0.7}, distill_token_ids=[[[1, 2]], [[3, 4]]],
              distill_logprobs=[[[-0.1, -0.2]], [[-0.3, -0.4]]], messages=[[{"role": "user", "content": [
                  {"type": "text", "text": "hi"}], "reward": 1}]] * 2, extra_field="kept"),
        group(rng, n=1, advantages=[[0.5, 0.5]], scores=[1]),
    ]
    expect = {}
    for i, g in enumerate(originals):
        pg = parse_group(g, [])
        lk.append_arrow("trajectories", pg.table(group_id=f"g{i}", env_name="toy", qseq=f"{i:04d}"),
                        event_type="atropos.group")
        expect[f"g{i}"] = orjson.loads(pg.served())
        assert expect[f"g{i}"] == orjson.loads(orjson.dumps(A.ScoredData.model_validate(g).model_dump()))
    with lk.snapshot() as snap:
        rows = snap.arrow("SELECT * FROM trajectories").to_pylist()
    by = {}
    for r in rows:
        by.setdefault(r["group_id"], []).append(r)
    assert len(rows) == 4 + 4 + 2 + 1
    for gid, want in expect.items():
        got = A.rows_to_group(by[gid])
        assert orjson.loads(orjson.dumps(got)) == want, gid
        assert list(got) == list(A.GROUP_KEYS)
    row = next(r for r in rows if r["trajectory_id"] == "g2:0")
    assert json.loads(row["raw"])["extra"] == {"extra_field": "kept"}
    assert row["reward"] == originals[2]["scores"][0]


def _model_path(g) -> ParsedGroup:
    return from_model(A.ScoredDataX.model_validate(g), {k: v for k, v in g.items() if k not in A.GROUP_KEYS}, [])


def test_fast_group_path_stores_and_serves_what_the_model_does():
    """parse_fast takes the shape envs send and nothing the model would coerce; what it takes gives the same
    served JSON (byte for byte) and the same lake rows as the pydantic model's path."""
    rng = random.Random(3)
    taken = [group(rng), group(rng, n=2, advantages=[], ref_logprobs=[[-0.5, -0.25]] * 2, group_overrides={"a": 1},
                                generation_params={"temperature": 0.7}, overrides=[{"t": 1}] * 2, extra_field=[1]),
             group(rng, n=2, scores=[1, 0], masks=[[1, 2]], inference_logprobs=[[1, 2.5]]),  # a length not n: kept whole
             group(rng, n=2, tokens=[[], [3]], masks=[[], [3]], inference_logprobs=[[], [1]]),
             group(rng, n=1, messages=[[{"role": "user", "content": [{"type": "text", "text": "hi"}], "x": 1}]])]
    for g in taken:
        pg = parse_fast(orjson.loads(orjson.dumps(g)))
        assert pg is not None
        want = _model_path(g)
        assert pg.served() == want.served()
        kw = dict(group_id="g", env_name="e", qseq="q")
        assert pg.table(**kw).equals(want.table(**kw))
    refused = [group(rng, tokens=[[True, 2]] * 4), group(rng, tokens=[["3"]] * 4), group(rng, scores=[True] * 4),
               group(rng, tokens=[[1.0, 2]] * 4), group(rng, tokens=[[1.5, 2]] * 4),
               group(rng, env_id="0"), group(rng, inference_logprobs=[["0.5"]] * 4), group(rng, masks=[[None]] * 4),
               group(rng, distill_token_ids=[[[1]]] * 4, distill_logprobs=[[[-0.1]]] * 4), group(rng, tokens=[]),
               group(rng, tokens=[[2 ** 64]] * 4), group(rng, messages=[[{"content": "no role"}]] * 4), [group(rng)]]
    for g in refused:
        assert parse_fast(g) is None
    # the model coerces some of them; the rows it gives are the same representation
    assert _model_path(refused[0]).values["tokens"].to_pylist() == [[1, 2]] * 4
    assert _model_path(refused[3]).values["tokens"].to_pylist() == [[1, 2]] * 4
    assert orjson.loads(_model_path(refused[6]).served())["inference_logprobs"] == [[0.5]] * 4


def test_packing_matches_atropos_semantics():
    def q(sizes, env=None):
        return [A.QGroup(f"g{i}", s, env, b"{}") for i, s in enumerate(sizes)]
    # packs of size M=4: two 2-groups make a pack; batch of 8 = two packs, in pack-completion order
    b, rest = A.grab_exact_from_heterogeneous_queue(q([4, 2, 1, 2, 1, 1, 1]), 8)
    assert [g.group_id for g in b] == ["g0", "g1", "g3"]
    assert [g.group_id for g in rest] == ["g2", "g4", "g5", "g6"]
    b, _ = A.grab_exact_from_heterogeneous_queue(q([4, 2]), 8)
    assert b is None
    assert A.find_groups_summing_to_target(q([3, 2, 2]), 4) == [1, 2]
    st = AtroposQueue()
    st.apply(Registered(REG))
    st.apply(st.env_event(A.RegisterEnv(max_token_length=10, desired_name="e", weight=1.0, group_size=4)))
    assert st.apply(GroupQueued(A.QGroup("a", 2, 0, b"{}"))) == {"status": "buffered", "buffer_size": 2}
    assert st.apply(GroupQueued(A.QGroup("b", 2, 0, b"{}"))) == {"status": "buffered", "buffer_size": 0}
    assert [g.group_id for g in st.queue] == ["a", "b"]
    assert [g.group_id for g in st.next_batch()] == ["a", "b"] and st.step == 6


REG = {"wandb_group": "", "wandb_project": "", "batch_size": 4, "max_token_len": 10, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 5, "num_steps": 1}


@pytest.mark.parametrize("mode", ["at-least-once", "at-most-once"])
def test_queue_restore_replays_what_live_applied(mode):
    """The events a live queue applied, replayed by restore(), give the same queue; a batch sent but not
    confirmed (at-least-once) is queued again, a reset settles what it dropped."""
    live, recorded, groups = AtroposQueue(), [], []

    def apply(ev):
        recorded.append(ev) if not isinstance(ev, GroupQueued) else groups.append(ev.group)
        return live.apply(ev)

    def add(gid, size=2, env=0):
        return apply(GroupQueued(A.QGroup(gid, size, env, gid.encode(), qseq=f"{len(groups):04d}")))

    apply(Registered(REG))
    apply(Started())
    apply(live.env_event(A.RegisterEnv(max_token_length=10, desired_name="e", weight=1.0, group_size=2)))
    for gid in "abcdefg":
        add(gid)
    add("half", size=1)  # buffered: the env's groups have 2 sequences
    served = []
    for _ in range(2):
        b = live.next_batch()
        apply(live.batch_event(f"batch-{len(served)}", b, mode))
        served.append([g.group_id for g in b])
    assert live.step == 5 + 3 and live.served == 2  # three batches formed at once, two served
    apply(live.disconnect_event(0))

    def unsettled(settled):
        return [g for g in groups if g.group_id not in settled]

    back = AtroposQueue.restore(recorded, unsettled)
    resent = set(served[1]) if mode == "at-least-once" else set()  # the last batch was never confirmed
    left = {g.group_id for g in live.queue} | {g.group_id for b in live.curr_batch for g in b} | resent
    assert {g.group_id for g in back.queue} == left
    assert [g.group_id for g in back.buffer[0]] == ["half"]
    assert back.step == 5 + 2 - len(resent) // 2 and back.envs[0]["connected"] is False
    assert back.registered and back.started and back.settled is None and not back.sent
    # a reset settles everything it dropped, whatever was sent, and ends the run
    apply(live.reset_event())
    again = AtroposQueue.restore(recorded, unsettled)
    assert not again.registered and again.queue == [] and again.buffer == {} and again.step == 0


def test_formats_detect_and_files(tmp_path):
    rng = random.Random(1)
    assert detect_record(batch_record()) == "hermes"
    assert detect_record(group(rng)) == "atropos"
    assert detect_record({"trajectory_id": "x", "messages": []}) == "native"
    with pytest.raises(BadInput):
        detect_record({"foo": 1})
    # multi-member gzip, one member per append (newer Hermes)
    p = tmp_path / "t.jsonl.gz"
    with open(p, "wb") as f:
        for k in range(3):
            r = batch_record()
            r["prompt_index"] = k
            f.write(gzip.compress((json.dumps(r) + "\n").encode()))
    pf = parse_file(p)
    assert pf.fmt == "hermes" and len(pf.records) == 3
    # a truncated last member is rejected with its line
    data = p.read_bytes()
    (tmp_path / "trunc.jsonl.gz").write_bytes(data[:-12])
    with pytest.raises(BadInput) as ei:
        parse_file(tmp_path / "trunc.jsonl.gz")
    assert ei.value.line == 3 and "truncated" in ei.value.reason
    # atropos groups file (data_path_to_save_groups: no env_id)
    g = group(rng)
    g.pop("env_id")
    (tmp_path / "groups.jsonl").write_text(json.dumps(g) + "\n" + json.dumps(g) + "\n")
    pf = parse_file(tmp_path / "groups.jsonl")
    assert pf.fmt == "atropos" and len(pf.records) == 8 and len({r["trajectory_id"] for r in pf.records}) == 8
    assert parse_body(b'{"a":1}\n{"a":2}\n') == [(1, {"a": 1}), (2, {"a": 2})]
    assert parse_body(b'[{"a":1},{"a":2}]') == [(None, {"a": 1}), (None, {"a": 2})]


def test_gunzip_bounded():
    assert gunzip_bounded(gzip.compress(b"a" * 10) + gzip.compress(b"b"), 100) == b"a" * 10 + b"b"
    with pytest.raises(BadInput) as ei:
        gunzip_bounded(gzip.compress(b"\0" * (5 << 20)), 1 << 20)
    assert ei.value.status == 413
    with pytest.raises(BadInput):
        gunzip_bounded(b"not gzip at all", 100)
    with pytest.raises(BadInput):
        gunzip_bounded(gzip.compress(b"x" * 1000)[:-10], 10000)


def test_skill_frontmatter():
    text = ("---\nname: python-debug-loop\ndescription: Use when a pytest failure needs root-causing.\n"
            "metadata: {hermes: {tags: [debugging]}}\n---\n# Python Debug Loop\n## When to Use\n")
    d = parse_skill(text.encode(), "software-development/python-debug-loop/SKILL.md")
    assert d.name == "python-debug-loop" and d.category == "software-development"
    assert d.frontmatter["metadata"]["hermes"]["tags"] == ["debugging"]
    assert parse_skill(text.encode(), "python-debug-loop/SKILL.md").category is None
    assert parse_skill(text.encode(), "mlops/inference/vllm/SKILL.md").category == "mlops"
    assert parse_skill(("\ufeff" + text).encode(), "x/SKILL.md").name == "python-debug-loop"
    for bad, why in [("no frontmatter\n", "does not start"), ("---\nname: x\n", "not closed"),
                     ("---\nname: ../../etc\n---\nbody\n", "not allowed"),
                     ("---\nname: ok\n---\n\n", "empty body")]:
        with pytest.raises(BadInput) as ei:
            parse_skill(bad.encode(), "x/SKILL.md")
        assert why in ei.value.reason
