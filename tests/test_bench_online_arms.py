"""bench/online_arms.py reports, besides the success table, each run's fraction of groups with a reward difference
at every training step (issue 45: "the fraction of groups with signal per step"), read from the run's step log."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    import online_arms  # noqa: E402  (bench/online_arms.py)
    import strategies  # noqa: E402

    return online_arms, strategies


def _log(run: Path, signal: list[float]) -> None:
    """A step log as rl_train_online writes it: an evaluation at step 0, the training steps, one at the end."""
    ev = {"eval": True, "success_rate": 0.2, "mean_reward": 0.2, "valid_tool_call_rate": 1.0,
          "first_call_valid_rate": 0.9}
    lines = [{**ev, "step": 0}]
    lines += [{"step": k + 1, "reward_mean": 0.25, "groups": 4, "signal_groups": x} for k, x in enumerate(signal)]
    lines.append({**ev, "step": len(signal), "success_rate": 0.4})
    run.mkdir(parents=True)
    (run / "train_log.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_the_last_record_carries_the_signal_of_every_step(tmp_path):
    _, st = _bench()
    _log(tmp_path / "run", [0.25, 0.0, 0.5])
    recs = st.online_records(tmp_path / "run", arm="cool-grpo", seed=1)
    assert [r["step"] for r in recs] == [0, 3]
    assert [r["success"] for r in recs] == [0.2, 0.4]
    assert "signal" not in recs[0] and recs[-1]["signal"] == [0.25, 0.0, 0.5]
    assert recs[-1]["seed"] == 1 and recs[-1]["arm"] == "cool-grpo"


def test_the_signal_table_has_a_row_per_run_and_counts_the_steps_without_an_update(tmp_path):
    oa, st = _bench()
    _log(tmp_path / "s0", [0.25, 0.0, 0.5, 0.0])
    _log(tmp_path / "s1", [0.5, 0.75, 0.25, 0.5])
    recs = [*st.online_records(tmp_path / "s1", arm="cool-grpo", seed=1),
            *st.online_records(tmp_path / "s0", arm="cool-grpo", seed=0)]
    recs.append({"arm": "gentle-grpo", "seed": 0, "step": 4, "success": 0.5})  # an earlier record, without signal
    rows = [r for r in oa.signal_table(recs, ["cool-grpo", "gentle-grpo"]) if r.startswith("| ") and "---" not in r]
    about = oa.ARMS["cool-grpo"][0]
    assert rows[1:] == [f"| {about} | 0 | 0.25 0.00 0.50 0.00 | 0.19 | 2 of 4 |",
                        f"| {about} | 1 | 0.50 0.75 0.25 0.50 | 0.50 | 0 of 4 |"]
    assert oa.signal_table(recs[-1:], ["gentle-grpo"]) == []  # no run with a step log's signal: no table
