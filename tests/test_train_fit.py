"""The rule a long conversation is cut by (trainers/modeling/fit.py, issue 37 item 1): an agent's conversation whose
system prompt and tool schemas are long keeps them, its task and the turn being trained, and drops older turns
first, as few as make it fit; one whose kept part is over is left out and counted; --max-length defaults to the
model's context, capped."""
from __future__ import annotations

import json

from train_helpers import TOOLS, tiny_dir  # noqa: F401  (the session's tiny model)

from trainers.modeling.batches import chat_ids, encode_all
from trainers.modeling.fit import fit, head_and_turns
from trainers.modeling.forward import IGNORE
from trainers.modeling.models import load_tokenizer
from trainers.runtime.model_folder import context_length
from trainers.sft.config import MAX_LENGTH_CAP, SFTConfig

LONG_SYSTEM = "You are an agent. " + " ".join(f"Rule {i}: answer with a tool call when one helps." for i in range(60))


def agent_chat(turns: int) -> dict:
    """Hermes' shape: a long system prompt with tools, the task, then tool calls and their results."""
    msgs = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Count the lines of a.txt."}]
    for t in range(turns):
        msgs += [{"role": "assistant", "content": f"Step {t}.",
                  "tool_calls": [{"id": f"c{t}", "name": "run", "arguments": json.dumps({"command": f"wc -l a{t}"})}]},
                 {"role": "tool", "content": f"{t} a{t}.txt " * 20, "tool_call_id": f"c{t}"}]
    msgs.append({"role": "assistant", "content": "There are 41 lines.", "tool_calls": []})
    return {"messages": msgs, "tools": TOOLS}


def test_a_long_agent_conversation_keeps_its_prompt_task_and_last_turn(tiny_dir):
    tok = load_tokenizer(str(tiny_dir))
    conv = agent_chat(12)
    size = lambda c: len(chat_ids(tok, c))  # noqa: E731
    head, turns = head_and_turns(conv["messages"])
    assert [m["role"] for m in head] == ["system", "user"] and len(turns) == 13
    budget = size({**conv, "messages": head + turns[-4] + turns[-3] + turns[-2] + turns[-1]}) + 5
    cut, was_cut = fit(conv, size, budget)
    assert was_cut and cut["tools"] == conv["tools"]
    # exactly the 9 oldest turns went: the head and the 4 newest turns are kept whole, and a fifth would not fit
    assert cut["messages"] == head + [m for t in turns[-4:] for m in t]
    assert size({**conv, "messages": head + [m for t in turns[-5:] for m in t]}) > budget
    examples, stats = encode_all(tok, [conv], budget)
    assert stats == {"examples": 1, "truncated": 1, "over_max_length": 0, "no_assistant_tokens": 0}
    ids, labels = examples[0]
    assert len(ids) <= budget and tok.decode([t for t in labels if t != IGNORE]).count("There are 41 lines.") == 1
    assert LONG_SYSTEM[-40:] in tok.decode(ids)  # the system prompt is whole

    assert len(encode_all(tok, [conv], 10**6)[0][0][0]) > budget  # whole, it would not have fitted
    # messages after the last assistant message carry no label: they go first, nothing else does
    tail = {**conv, "messages": conv["messages"] + [{"role": "user", "content": "thanks " * 400}]}
    assert fit(tail, size, size(conv)) == (conv, True)


def test_what_the_rule_keeps_over_the_budget_is_left_out_and_counted(tiny_dir):
    tok = load_tokenizer(str(tiny_dir))
    conv = agent_chat(3)
    head, turns = head_and_turns(conv["messages"])
    kept = len(chat_ids(tok, {**conv, "messages": head + turns[-1]}))
    assert fit(conv, lambda c: len(chat_ids(tok, c)), kept - 1) == (None, True)
    short = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "tools": None}
    examples, stats = encode_all(tok, [conv, short], kept - 1)
    assert len(examples) == 1 and stats["over_max_length"] == 1 and stats["truncated"] == 0


def test_max_length_defaults_to_the_models_context_capped(tiny_dir, tmp_path):
    assert context_length(str(tiny_dir)) == json.loads((tiny_dir / "config.json").read_text())["max_position_embeddings"]
    cfg = SFTConfig(data="x")
    assert cfg.max_length is None
    assert cfg.settle_length(str(tiny_dir)).max_length == min(context_length(str(tiny_dir)), MAX_LENGTH_CAP)
    assert SFTConfig(data="x", max_length=300).settle_length(str(tiny_dir)).max_length == 300  # given: kept
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))  # "no limit"
    assert cfg.settle_length(str(tmp_path)).max_length == 512
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    assert cfg.settle_length(str(tmp_path)).max_length == MAX_LENGTH_CAP
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}))
    assert cfg.settle_length(str(tmp_path)).max_length == 2048
