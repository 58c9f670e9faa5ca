"""What one row can cost a trainer (issue 26 item 14): a conversation is cut at --max-length x CHARS_PER_TOKEN_MAX
characters before it is tokenized (trainers/sft/data.py `bounded`), so a 20 MB row in the followed view costs the
streaming trainer what a row of that size costs, not GBs of tokenizer offsets; the cut and skipped rows are
counted in the run's metrics. The cut keeps every token a max_length truncation keeps (same examples)."""
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


def _long_chat(chars: int) -> dict:
    words = " ".join(f"w{i % 97}" for i in range(chars // 3 + 1))[:chars]
    return {"messages": [{"role": "system", "content": "You operate a shell workspace."},
                         {"role": "user", "content": "Summarise: " + words},
                         {"role": "assistant", "content": "Done: " + words[:200]}], "tools": TOOLS}


def test_the_cut_keeps_every_token_a_max_length_truncation_keeps(tiny_dir):
    tok = load_tokenizer(str(tiny_dir))
    rows = [_long_chat(30_000), *tool_chats(3, seed=1)]
    for max_length in (64, 512):
        full, _ = conversations(rows, "rows", "all")
        cut, stats = conversations(rows, "rows", "all", max_length)
        assert stats["truncated_rows"] == 1 and stats["skipped_rows"] == 0
        assert len(json.dumps(cut[0]["messages"])) < max_length * CHARS_PER_TOKEN_MAX + 1000
        assert cut[1:] == full[1:]  # short rows untouched
        assert encode_all(tok, cut, max_length)[0] == encode_all(tok, full, max_length)[0]


def test_rows_whose_tool_schemas_alone_are_over_are_skipped_and_counted():
    conv = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "x" * 5000}}]}
    assert bounded(conv, 4096) == (None, True)
    assert bounded(conv, 10_000) == (conv, False)
    _, stats = conversations([conv, *tool_chats(2)], "rows", "all", max_length=256)
    assert stats["skipped_rows"] == 1 and stats["conversations"] == 2
    many = {"messages": [{"role": "user", "content": ""}] * 100_000 + [{"role": "assistant", "content": "a"}],
            "tools": None}  # a million empty messages cost too: each counts its template overhead
    cut, was_cut = bounded(many, 4096)
    assert was_cut and len(cut["messages"]) < 300


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
    # cut inside its user turn, the huge row has no assistant token left (as max_length truncation would leave it)
    assert event["metrics"]["truncated_rows"] == 1 and event["metrics"]["new_examples"] == 2
    print(f"peak growth {grew >> 20} MB")
    # the row itself is held a few times over (view row, JSON, normalised messages): ~10 x 20 MB; before the
    # cut its tokenization alone added GBs (3.6 GB peak with SmolLM2's tokenizer)
    assert grew < 400 << 20, f"the increment's peak grew {grew >> 20} MB"
