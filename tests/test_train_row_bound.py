"""What one row can cost a trainer (issue 26 item 14): a conversation is cut at --max-length x CHARS_PER_TOKEN_MAX
characters before it is tokenized (trainers/sft/data.py `bounded`), so a 20 MB row in the followed view costs the
streaming trainer what a row of that size costs, not GBs of tokenizer offsets; the cut and left-out rows are
counted in the run's metrics. The cut in characters drops no turn the cut in tokens keeps (same examples): both
follow trainers/modeling/fit.py's rule (issue 37: older turns dropped, system prompt, task and last turn kept)."""
from __future__ import annotations

import json

import pytest

from train_helpers import TOOLS, tiny_dir, tool_chats  # noqa: F401  (the session's tiny model)
from views_helpers import seeded_trajectories

from lake import Lake
from trainers.sft.data import CHARS_PER_TOKEN_MAX, bounded, conversations
from trainers.modeling.models import load_tokenizer
from trainers.modeling.batches import encode_all
from trainers.watch.loop import StreamTrainer
from trainers.watch.config import WatchConfig

HUGE = 20 << 20  # the 20 MB row


def _vm(key: str) -> int:
    """VmRSS / VmHWM of this process, in bytes (the peak counts the tokenizer's native memory, unlike tracemalloc)."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _long_chat(chars: int, turns: int = 40) -> dict:
    """A system prompt, a task and `turns` turns of about chars / turns characters each."""
    words = " ".join(f"w{i % 97}" for i in range(chars // 3 + 1))
    each = chars // turns
    msgs = [{"role": "system", "content": "You operate a shell workspace."}, {"role": "user", "content": "Summarise."}]
    for t in range(turns):
        msgs += [{"role": "assistant", "content": f"Part {t}: " + words[t * each:(t + 1) * each]},
                 {"role": "user", "content": f"go on after part {t}"}]
    return {"messages": msgs + [{"role": "assistant", "content": "Done."}], "tools": TOOLS}


def test_the_cut_in_characters_keeps_every_turn_the_cut_in_tokens_keeps(tiny_dir):
    tok = load_tokenizer(str(tiny_dir))
    rows = [_long_chat(300_000), *tool_chats(3, seed=1)]
    full, _ = conversations(rows, "rows", "all")
    for max_length in (768, 4096):
        cut, stats = conversations(rows, "rows", "all", max_length)
        assert stats["truncated_rows"] == 1 and stats["skipped_rows"] == 0
        assert len(json.dumps(cut[0]["messages"])) < max_length * CHARS_PER_TOKEN_MAX + 1000
        assert cut[0]["messages"][:2] == full[0]["messages"][:2] and cut[0]["messages"][-2:] == full[0]["messages"][-2:]
        assert cut[1:] == full[1:]  # short rows untouched
        examples, enc = encode_all(tok, cut, max_length)
        assert examples == encode_all(tok, full, max_length)[0] and enc["truncated"] == 1
        assert len(examples[0][0]) <= max_length


def test_rows_whose_tool_schemas_alone_are_over_are_skipped_and_counted():
    conv = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "x" * 5000}}]}
    assert bounded(conv, 4096) == (None, True)
    assert bounded(conv, 10_000) == (conv, False)
    _, stats = conversations([conv, *tool_chats(2)], "rows", "all", max_length=256)
    assert stats["skipped_rows"] == 1 and stats["conversations"] == 2
    many = {"messages": [{"role": "user", "content": ""}] * 100_000 + [{"role": "assistant", "content": "a"}],
            "tools": None}  # a million empty messages cost too: each counts its template overhead
    assert bounded(many, 4096) == (None, True)  # all of them are the last turn's: nothing the rule may drop
    turns = {"messages": [{"role": "user", "content": "task"}]
             + [{"role": "assistant", "content": "a"}, {"role": "user", "content": ""}] * 50_000
             + [{"role": "assistant", "content": "done"}], "tools": None}
    cut, was_cut = bounded(turns, 4096)
    assert was_cut and 100 < len(cut["messages"]) < 300
    assert cut["messages"][0]["content"] == "task" and cut["messages"][-1]["content"] == "done"


@pytest.mark.attack
def test_a_20_mb_row_in_the_followed_view_costs_the_streaming_trainer_little(tmp_path, tiny_dir):
    lake = Lake.init(tmp_path / "lake")
    rows = seeded_trajectories(3, seed=7, start=7)
    for r in rows:
        r["success"], r["reward"] = True, 1.0
    user = next(m for m in rows[0]["messages"] if m["role"] == "user")
    user["content"] = "ls -la " * (HUGE // 7)  # a 20 MB user turn
    lake.append("trajectories", rows)
    st = StreamTrainer(WatchConfig(lake_root=str(lake.root), output=str(tmp_path / "watch"), split="all",
                                   batch_size=4, max_steps=1, progress=False, threads=1, replay=0))
    try:
        before = _vm("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:  # VmHWM from here on: this increment's peak
            f.write("5")
        event = st.step()
        grew = _vm("VmHWM") - before
    finally:
        st.close()
    # its task (the first user turn) is over --max-length: the rule cannot cut it, the row is left out and counted
    assert event["metrics"]["left_out"] == {"over_max_length": 1} and event["metrics"]["new_examples"] == 2
    print(f"peak growth {grew >> 20} MB")
    # the row itself is held a few times over (view row, JSON, normalised messages): ~10 x 20 MB; before the
    # cut its tokenization alone added GBs (3.6 GB peak with SmolLM2's tokenizer)
    assert grew < 400 << 20, f"the increment's peak grew {grew >> 20} MB"
