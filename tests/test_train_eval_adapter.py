"""`hermes_eval --adapter runs/<run>` (issue 9, item 12): a run folder works for a LoRA run and a --full run, and
evaluates the model that run trained (failed before with "has no adapter_config.json" for every run folder)."""
from __future__ import annotations

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


@pytest.mark.parametrize("full", [False, True], ids=["lora", "full"])
def test_a_run_folder_is_an_adapter_for_hermes_eval(tiny_dir, tmp_path, full):
    import torch

    from trainers.sft.config import SFTConfig
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import run_eval
    from trainers.modeling.models import load_model, resolve_adapter
    from trainers.sft.sft import run_sft

    run = tmp_path / "run"
    run_sft(SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                      output=str(run), full=full, max_steps=2, batch_size=4, learning_rate=1e-2, record_in_lake=False,
                      progress=False, plot=False))
    sub = run / ("model" if full else "adapter")
    assert resolve_adapter(str(run)) == str(sub)
    assert resolve_adapter(str(sub)) == str(sub)
    trained = load_model(str(tiny_dir), str(run)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert not torch.allclose(trained(input_ids=ids).logits, load_model(str(tiny_dir)).eval()(input_ids=ids).logits)
    summary = run_eval(EvalSettings(model=str(tiny_dir), task="shell", adapter=str(run), limit=1, max_turns=1,
                                    max_new_tokens=8, record_in_lake=False, progress=False))
    assert summary["episodes"] == 1 and summary["adapter"] == str(sub)


def test_hermes_eval_cli_takes_a_run_folder(tiny_dir, tmp_path):
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    run = tmp_path / "run"
    run_sft(SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                      output=str(run), max_steps=1, batch_size=4, record_in_lake=False, progress=False, plot=False))
    r = th.run_cli("hermes_eval", "--model", str(tiny_dir), "--task", "shell", "--adapter", str(run), "--limit", "1",
                   "--max-turns", "1", "--max-new-tokens", "4", "--no-lake", "--json")
    assert r.returncode == 0, r.stderr
    assert '"episodes": 1' in r.stdout and str(run / "model") in r.stdout  # tiny: full fine-tuning by default


def test_a_folder_that_is_no_run_is_a_one_line_error(tmp_path):
    from trainers.runtime.errors import TrainerInputError
    from trainers.modeling.models import resolve_adapter

    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainerInputError, match="no adapter/ or model/ folder"):
        resolve_adapter(str(tmp_path / "empty"))
    with pytest.raises(TrainerInputError, match="does not exist"):
        resolve_adapter(str(tmp_path / "missing"))


def _narrow_tiny(tiny_dir, dest):
    """A second from-scratch model of another width (64, not 128) with tiny's tokenizer: an adapter trained on it
    cannot go on tiny."""
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    import torch

    cfg = AutoConfig.from_pretrained(tiny_dir)
    cfg.hidden_size, cfg.intermediate_size = 64, 128
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(dest)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(dest)
    return dest


def test_hermes_eval_reads_the_model_from_the_run_and_a_mismatch_is_one_line(tiny_dir, tmp_path):
    # issue 27 item 4: `hermes_eval --adapter runs/<run>` evaluated the default tiny model with the run's adapter
    # (a size-mismatch traceback when the run trained another model)
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    narrow = _narrow_tiny(tiny_dir, tmp_path / "narrow")
    run = tmp_path / "run"
    run_sft(SFTConfig(model=str(narrow), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                      output=str(run), full=False, max_steps=1, batch_size=4, record_in_lake=False, progress=False,
                      plot=False))
    args = ["--task", "shell", "--adapter", str(run), "--limit", "1", "--max-turns", "1", "--max-new-tokens", "4",
            "--no-lake"]
    r = th.run_cli("hermes_eval", *args, "--json")
    assert r.returncode == 0, r.stderr
    assert f'"model": "{narrow}"' in r.stdout and str(run / "adapter") in r.stdout
    r = th.run_cli("hermes_eval", "--model", str(tiny_dir), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "size mismatch" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"trained on {narrow}, not on {tiny_dir}" in " ".join(r.stderr.split()), r.stderr
