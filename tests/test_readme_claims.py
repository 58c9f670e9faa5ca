"""The README (and docs/compare.md) says what the code does (issue 27 item 12): the native record's required fields, the tiny model's
full fine-tuning, and the <50 interactions warning counted over the whole export, each checked against the code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_required_fields_of_a_native_record_are_the_ones_the_lake_requires():
    from lake.records import RecordError, validate_records

    m = re.search(r"A native\s+trajectory record \(fields in `lake/schemas.py`; ([^,]+) are required", README)
    assert m, "the README names the required fields of a native trajectory record"
    named = set(re.findall(r"`(\w+)`", m.group(1)))
    assert named == {"trajectory_id", "messages"}
    full = {"trajectory_id": "t", "messages": [{"role": "user", "content": "q"}]}
    validate_records("trajectories", [full])
    for field in named:  # each named field is required, and nothing else is
        with pytest.raises(RecordError, match=field):
            validate_records("trajectories", [{k: v for k, v in full.items() if k != field}])


def test_the_tiny_model_trains_in_full_as_the_readme_says():
    from trainers.sft.config import SFTConfig

    line = next(x for x in README.splitlines() if x.startswith("rl_finetune_supervised --model=tiny"))
    assert "tiny trains in full" in line and "pretrained: LoRA" in line
    cfg = SFTConfig(model="tiny", data="x")
    assert cfg.settle(from_scratch=True).full is True and cfg.settle(from_scratch=False).full is False


def test_the_minimum_interactions_warning_counts_the_whole_export():
    from views.interactions import InteractionCount

    compare = (Path(__file__).resolve().parent.parent / "docs" / "compare.md").read_text()
    row = next(x for x in compare.splitlines() if x.startswith("| minimum-data warning before SFT"))
    assert "50 interactions in total" in row and ", per task" not in row
    # 30 + 30 interactions over two tasks: under 50 per task, 60 in all: no warning
    assert InteractionCount(60, 50, {"a": 30, "b": 30}).warning() is None
    assert "only 40 complete interactions exported over 2 tasks" in InteractionCount(40, 50, {"a": 20, "b": 20}).warning()
