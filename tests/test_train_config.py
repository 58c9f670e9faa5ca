"""Training configuration: one validated dataclass per command, the CLI's defaults taken from it, defaults that
suit the model (full fine-tuning from scratch, LoRA for pretrained), warm-up bounded by the run, a warning
for runs too short to learn, and a lake that must exist."""
from __future__ import annotations

import dataclasses

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)
from trainers.sft.config import MIN_SCRATCH_STEPS, InstructConfig, SFTConfig
from trainers.runtime.errors import TrainerInputError


def _cli_defaults(app) -> dict:
    import typer

    return {p.name: p.default for p in typer.main.get_command(app).params}


def test_both_training_commands_take_their_defaults_from_the_configs():
    from lachesis.train_cli import llm_app, sft_app

    sft, llm = _cli_defaults(sft_app), _cli_defaults(llm_app)
    for cfg_cls, cli in ((SFTConfig, sft), (InstructConfig, llm)):
        for f in dataclasses.fields(cfg_cls):
            if f.name in cli and f.default is not dataclasses.MISSING:
                assert cli[f.name] == f.default, (cfg_cls.__name__, f.name)
    # the drift the issue found: epochs 1 vs 3, batch 8 vs 16, split all vs train
    for key in ("epochs", "batch_size", "split", "full", "warmup_steps"):
        assert sft[key] == llm[key], key
    assert (sft["epochs"], sft["batch_size"], sft["split"]) == (3.0, 16, "train")
    assert all(f.metadata.get("help") for f in dataclasses.fields(InstructConfig))


@pytest.mark.parametrize("field,value,words", [
    ("grad_accum", 0, "--grad-accum must be at least 1"), ("batch_size", 0, "--batch-size"),
    ("epochs", 0, "--epochs must be positive"), ("learning_rate", -1.0, "--learning-rate must be positive"),
    ("lora_dropout", 1.5, "--lora-dropout"), ("warmup_steps", -1, "--warmup-steps"),
    ("target_modules", " , ", "--target-modules is empty"), ("data", "", "no dataset given"),
])
def test_bad_values_are_one_line_input_errors(field, value, words):
    with pytest.raises(TrainerInputError, match=words.replace("-", r"\-")) as err:
        SFTConfig(**{"data": "x.jsonl", field: value})
    assert "\n" not in str(err.value)


def test_unknown_method_and_bad_beta():
    with pytest.raises(TrainerInputError, match="unknown --method 'ppo'"):
        InstructConfig(data="x", method="ppo")
    with pytest.raises(TrainerInputError, match="--beta"):
        InstructConfig(data="x", method="dpo", beta=0)
    assert InstructConfig(data="x", method="DPO").method == "dpo"


def test_grad_accum_zero_on_the_command_line_is_one_line_exit_2(tmp_path):
    data = th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(4))
    for script in ("rl_finetune_supervised", "llm_finetune"):
        r = th.run_cli(script, "--model", "tiny", "--data", str(data), "--no-lake", "--grad-accum", "0",
                       "--output", str(tmp_path / "run"))
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "--grad-accum must be at least 1" in r.stderr
    assert not (tmp_path / "run").exists()


def test_defaults_suit_the_model():
    cfg = SFTConfig(data="x")
    assert cfg.full is None and cfg.learning_rate is None  # decided once the model is known
    scratch, pretrained = cfg.settle(from_scratch=True), cfg.settle(from_scratch=False)
    assert (scratch.full, scratch.learning_rate) == (True, 1e-3)
    assert (pretrained.full, pretrained.learning_rate) == (False, 2e-4)
    assert SFTConfig(data="x", full=False).settle(from_scratch=True).full is False  # --lora wins
    assert InstructConfig(data="x", method="dpo").settle(from_scratch=False).learning_rate == 1e-4


def test_warmup_is_bounded_by_the_run_and_short_runs_warn():
    # the guide's command on a small export: 80 conversations, batch 16, 3 epochs = 15 steps
    plan = SFTConfig(data="x", epochs=3).plan(80)
    assert (plan.total, plan.warmup) == (15, 1)
    assert "only 15 optimizer steps" in plan.warning(from_scratch=True)
    assert plan.warning(from_scratch=False) is None
    long = SFTConfig(data="x", max_steps=2000).plan(80)
    assert (long.total, long.warmup) == (2000, 30) and long.warning(True) is None
    assert SFTConfig(data="x", max_steps=MIN_SCRATCH_STEPS).plan(1).warning(True) is None
    assert SFTConfig(data="x", epochs=1, batch_size=4, grad_accum=2).plan(80).total == 10


def test_guides_command_on_tiny_fine_tunes_fully_with_a_short_warmup_and_warns(tiny_dir, tmp_path):
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "trajectories.jsonl", th.tool_chats(80))
    s = SFTConfig(model=str(tiny_dir), data=str(data), epochs=3, output=str(tmp_path / "run"), record_in_lake=False,
                  progress=False, plot=False)
    summary = run_sft(s)
    assert summary["full"] is True and summary["trainable_params"] > 500_000
    assert (summary["steps"], summary["warmup_steps"]) == (15, 1)
    assert summary["warnings"] and "at least 200" in summary["warnings"][0]
    assert summary["final_loss"] < summary["first_loss"] - 1.0  # full FT at 1e-3 learns even in 15 steps


def test_mistyped_lake_is_an_error_and_creates_nothing(tiny_dir, tmp_path):
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(4))
    missing = tmp_path / "no-such-lake"
    with pytest.raises(TrainerInputError, match="no lake at"):
        run_sft(SFTConfig(model=str(tiny_dir), data=str(data), lake_root=str(missing), output=str(tmp_path / "run"),
                          progress=False))
    assert not missing.exists() and not (tmp_path / "run").exists()
    with pytest.raises(TrainerInputError, match="no lake at"):  # a view name read from a lake that is not there
        run_sft(SFTConfig(model=str(tiny_dir), data="sft", lake_root=str(missing), record_in_lake=False,
                          output=str(tmp_path / "run2"), progress=False))
    assert not missing.exists() and not (tmp_path / "run2").exists()
