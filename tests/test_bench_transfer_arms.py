"""bench/transfer_arms.py reads issue 24's transfer target off its step grid: the first scored step at which each arm
reaches a success level, per seed, and transfer's steps over no transfer's (a level only transfer reaches within
the grid is an upper bound, not a ratio)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    import transfer_arms  # noqa: E402  (bench/transfer_arms.py)

    return transfer_arms


def test_ratio_of_reads_steps_to_a_level():
    ta = _bench()
    assert ta.ratio_of(0, 12, 24) == "0.00"
    assert ta.ratio_of(6, 12, 24) == "0.50"
    assert ta.ratio_of(24, None, 24) == "< 1.00"  # no transfer did not get there within 24 steps
    assert ta.ratio_of(None, 12, 24) == "-"
    assert ta.ratio_of(0, 0, 24) == "both at step 0"


def test_the_table_finds_the_first_step_at_each_level_per_seed():
    ta = _bench()
    t, n = ta.transfer_arm("0-8"), ta.NO_TRANSFER
    curve = {t: [0.06, 0.02, 0.00, 0.04, 0.10], n: [0.00, 0.00, 0.00, 0.06, 0.06]}  # one dip: the first hit counts
    steps = (0, 4, 8, 12, 24)
    records = [{"arm": arm, "seed": 0, "step": k, "success": v} for arm, vs in curve.items() for k, v in zip(steps, vs)]
    size = replace(ta.SIZES["quick"], transfer_steps=steps[1:])
    lines = ta.table(records, size, [t, n], "git_repo_env", ta.LEVELS)
    rows = {r.split(" | ")[0].strip("| "): r for r in lines}
    assert any(r.startswith("Steps to git_repo_env test success >= level") for r in lines)
    assert rows["0.05"] == "| 0.05 | 0 | 12 | 0.00 |"
    assert rows["0.10"] == "| 0.10 | 24 | - | < 1.00 |"
    assert rows["0.15"] == "| 0.15 | - | - | - |"
    assert rows[t].startswith(f"| {t} | 0.060 | 0.020 | 0.000 |")


def test_other_levels_are_read_for_another_target():
    """--levels: a web target's levels (its success runs higher than git's), read the same way."""
    ta = _bench()
    t, n = ta.transfer_arm("0-8"), ta.NO_TRANSFER
    curve = {t: [0.18, 0.00, 0.16, 0.45], n: [0.00, 0.14, 0.18, 0.45]}
    steps = (0, 3, 6, 12)
    records = [{"arm": arm, "seed": 0, "step": k, "success": v} for arm, vs in curve.items() for k, v in zip(steps, vs)]
    size = replace(ta.SIZES["quick"], transfer_steps=steps[1:])
    rows = {r.split(" | ")[0].strip("| "): r for r in ta.table(records, size, [t, n], "web_fill_env", (0.1, 0.2))}
    assert rows["0.10"] == "| 0.10 | 0 | 3 | 0.00 |"
    assert rows["0.20"] == "| 0.20 | 12 | 12 | 1.00 |"
    assert "0.05" not in rows


def test_an_empty_freeze_names_the_embeddings_only_arm():
    """--freeze '': rl_transfer_init freezes the embeddings and no layer; the arm's name says so."""
    ta = _bench()
    assert ta.transfer_arm("") == "transfer, embeddings only frozen"
    assert ta.transfer_arm("0-8") == "transfer, layers 0-8 frozen"


def test_a_baseline_from_an_earlier_run_must_be_of_the_same_target_and_size(tmp_path):
    """--baseline-from: the no-transfer records of an earlier transfer.json are reused only when its target, data,
    step grid and seeds are this run's; else one line naming what differs."""
    import json
    from dataclasses import asdict

    import pytest

    ta = _bench()
    size = ta.size_for("tiny", True, 2, (2, 4), 5)
    recs = [{"arm": ta.NO_TRANSFER, "seed": sd, "step": k, "success": 0.1} for sd in (0, 1) for k in (0, 2, 4)]
    recs.append({"arm": "transfer, layers 0 frozen", "seed": 0, "step": 2, "success": 0.3})
    path = tmp_path / "transfer.json"
    path.write_text(json.dumps({"target_env": "web_fill_env", "size": asdict(size), "records": recs}))
    got = ta.earlier_baseline(path, size, "web_fill_env")
    assert len(got) == 6 and {r["arm"] for r in got} == {ta.NO_TRANSFER}
    with pytest.raises(SystemExit, match="target_env 'web_fill_env', this run 'git_repo_env'"):
        ta.earlier_baseline(path, size, "git_repo_env")
    with pytest.raises(SystemExit, match="transfer_steps"):
        ta.earlier_baseline(path, replace(size, transfer_steps=(2, 8)), "web_fill_env")
