"""The demo end to end at a toy size (slow: ~40 s). The full-size numbers are in the trainers report."""
from __future__ import annotations

import json

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


@pytest.mark.slow
def test_demo_runs_end_to_end_at_toy_size(tiny_dir, tmp_path):
    from trainers.demo import main

    rc = main(["--workdir", str(tmp_path / "demo"), "--expert", "40", "--noisy", "10", "--train-seconds", "5",
               "--eval-limit", "3", "--workers", "1"])
    assert rc == 0
    res = json.loads((tmp_path / "demo" / "demo_result.json").read_text())
    assert res["rollouts"]["expert"] == 40 and res["rollouts"]["expert_success"] == 1.0
    assert res["before"]["episodes"] == 3 and res["after"]["episodes"] == 3
    assert res["train"]["steps"] > 0
    for p in res["plots"]:
        assert (tmp_path / "demo" / p.split("/demo/")[-1]).exists()
    from lake import Lake

    snap = Lake(str(tmp_path / "demo" / "lake")).snapshot()
    kinds = sorted(r["kind"] for r in snap.arrow("SELECT kind FROM runs").to_pylist())
    assert kinds == ["eval", "eval", "train"]
