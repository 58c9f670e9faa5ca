"""The demo end to end at a toy size (slow: ~40 s), and `--from-lake` (just train-sft) evaluating the
environments the lake holds; `--model smollm2` at a toy size (slow), and the sizes each model gets by default.
The full-size numbers are in trainers/README.md."""
from __future__ import annotations

import json

import pytest

from train_helpers import tiny_dir  # noqa: F401  (session fixture)


@pytest.mark.slow
def test_demo_runs_end_to_end_at_toy_size(tiny_dir, tmp_path):
    from rich.console import Console

    from lachesis.demo import DemoConfig, run_demo
    from lake import Lake

    work = tmp_path / "demo"
    res = run_demo(DemoConfig(model="tiny", workdir=str(work), expert=40, noisy=10, steps=12, eval_limit=3, workers=1,
                              threads=1), Console(quiet=True))
    assert res == json.loads((work / "demo_result.json").read_text())
    assert res["rollouts"]["expert"] == 40 and res["rollouts"]["expert_success"] == 1.0
    ev = res["evals"]["bash_exec_env"]
    assert ev["before"]["episodes"] == 3 and ev["after"]["episodes"] == 3
    assert res["train"]["steps"] == 12  # a fixed step count, never wall time
    assert [p.rsplit("/", 1)[-1] for p in res["plots"]] == ["loss.png", "demo_eval.png"]
    assert all((work / p.split("/demo/")[-1]).exists() for p in res["plots"])
    kinds = sorted(r["kind"] for r in Lake(work / "lake").snapshot().arrow("SELECT kind FROM runs").to_pylist())
    assert kinds == ["eval", "eval", "train"]
    assert res["ui"] == f"lake ui --lake {res['lake']}" and res["lake"] == str(work / "lake")  # the README's last step

    # train-sft: the same lake again, every environment of its sft data evaluated (here the one it holds)
    again = run_demo(DemoConfig(model="tiny", workdir=str(tmp_path / "again"), from_lake=True, lake_root=str(work / "lake"),
                                steps=2, eval_limit=1, threads=1), Console(quiet=True))
    assert list(again["evals"]) == ["bash_exec_env"] and again["train"]["steps"] == 2


def test_from_lake_needs_an_existing_lake(tmp_path):
    from rich.console import Console

    from lachesis.demo import DemoConfig, run_demo
    from trainers.runtime.errors import TrainerInputError

    with pytest.raises(TrainerInputError, match="no lake at"):
        run_demo(DemoConfig(workdir=str(tmp_path / "w"), from_lake=True, lake_root=str(tmp_path / "nope")),
                 Console(quiet=True))
    assert not (tmp_path / "nope").exists()


def test_sizes_follow_the_model_and_explicit_values_win():
    from lachesis.demo import SIZES, DemoConfig

    tiny, smol = DemoConfig(model="tiny"), DemoConfig()
    assert smol.model == "smollm2"  # the quick start's model: a pretrained one that visibly improves
    assert (tiny.expert, tiny.steps, tiny.eval_limit, tiny.batch_size, tiny.size) == (2200, 1800, 100, 16, "tiny")
    assert smol.size == "pretrained" and all(getattr(smol, k) == v for k, v in SIZES["pretrained"].items())
    assert smol.steps < tiny.steps and smol.expert < tiny.expert and smol.eval_limit < tiny.eval_limit
    assert DemoConfig(model="SmolLM2", steps=5, lr=3e-4).steps == 5 and DemoConfig(model="smollm2", lr=3e-4).lr == 3e-4
    assert DemoConfig(model="tiny-llama").size == "tiny" and DemoConfig(model="/models/x").size == "pretrained"


@pytest.mark.slow
def test_demo_with_smollm2_trains_lora_at_toy_size(tiny_dir, tmp_path):  # noqa: F811
    """`just demo --model smollm2` on its own path: LoRA (an adapter, not a model, in the run folder), the same
    evaluation before and after, the model named in the result."""
    from rich.console import Console

    from lachesis.demo import DemoConfig, run_demo

    work = tmp_path / "demo"
    res = run_demo(DemoConfig(model="smollm2", workdir=str(work), expert=8, noisy=0, steps=2, eval_limit=2,
                              workers=1, threads=1), Console(quiet=True))
    assert (res["model"], res["lora"], res["train"]["steps"]) == ("smollm2", True, 2)
    assert (work / "run" / "adapter" / "adapter_config.json").is_file() and not (work / "run" / "model").exists()
    ev = res["evals"]["bash_exec_env"]
    assert ev["before"]["episodes"] == ev["after"]["episodes"] == 2
    assert ev["before"]["model"] == ev["after"]["model"] == "smollm2" and ev["after"]["adapter"]
