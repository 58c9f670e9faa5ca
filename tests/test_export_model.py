"""`lake export-model` (issue 25, item 4): a LoRA run merged into one Hugging Face folder that plain
`from_pretrained` loads and that computes what the adapter model computes, and with --format gguf a model.gguf
that transformers' GGUF reader loads back to the same logits and tokens; a full run exported as it is; bad runs,
a non-empty output and bad options are one-line errors that write nothing."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import train_helpers as th
from ingest_helpers import lake_cmd
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def _lake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*lake_cmd(), *args], capture_output=True, text=True, timeout=120, cwd=str(th.REPO),
                          env={**os.environ})


def _train(tiny_dir, tmp_path, full: bool):
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    run = tmp_path / "run"
    run_sft(SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                      output=str(run), full=full, max_steps=2, batch_size=4, learning_rate=1e-2, record_in_lake=False,
                      progress=False, plot=False))
    return run


@pytest.mark.parametrize("full", [False, True], ids=["lora", "full"])
def test_export_merged_loads_with_from_pretrained_and_matches_the_run(tiny_dir, tmp_path, full):
    """The LoRA run through the real command (--format gguf: the merged folder plus model.gguf); the full run
    through the function it calls."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.modeling.models import load_model

    th.set_threads()
    run = _train(tiny_dir, tmp_path, full)
    out = tmp_path / "exported"
    if full:
        from trainers.export.config import ExportModelConfig
        from trainers.export.merged import export_model

        info = export_model(ExportModelConfig(run=str(run), output=str(out)))
    else:
        r = _lake("export-model", str(run), "--output", str(out), "--format", "gguf", "--json")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
    assert info["lora"] is (not full) and info["output"] == str(out.resolve())
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not (out / "adapter_config.json").exists()  # a plain model, no peft needed
    assert (out / "chat_template.jinja").is_file() and json.loads((out / "lachesis_export.json").read_text())["run"]
    # readable like the rest (issue 37, item 9): save_pretrained alone leaves model.safetensors 0600
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert len(set(modes.values())) == 1 and modes["model.safetensors"] & 0o044, modes

    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    trained = load_model(str(tiny_dir), str(run), device=torch.device("cpu")).eval()
    base = load_model(str(tiny_dir), device=torch.device("cpu")).eval()
    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template([{"role": "user", "content": "run `wc -l < a.txt`"}], tools=th.TOOLS,
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        got, want, before = merged(input_ids=ids).logits, trained(input_ids=ids).logits, base(input_ids=ids).logits
    assert not torch.allclose(want, before, atol=1e-3)  # the run changed the model: the comparison means something
    assert (got - want).abs().max().item() < 1e-5
    if full:
        return
    from gguf import GGUFReader

    assert info["gguf"] == str(out.resolve() / "model.gguf")
    from_gguf = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32).eval()
    with torch.no_grad():
        assert (from_gguf(input_ids=ids).logits - got).abs().max().item() < 1e-5
    assert AutoTokenizer.from_pretrained(out, gguf_file="model.gguf")(text).input_ids == tok(text).input_ids
    fields = GGUFReader(str(out / "model.gguf")).fields
    text_of = lambda key: bytes(fields[key].parts[fields[key].data[0]]).decode()  # noqa: E731
    assert text_of("tokenizer.chat_template") == tok.chat_template  # llama.cpp renders chats with it
    assert text_of("tokenizer.ggml.pre") == "smollm"  # the tiny tokenizer splits digits one by one, as llama.cpp's smollm


def test_export_of_a_streaming_checkpoint_takes_the_newest_or_the_named_step(tiny_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    from trainers.runtime import checkpoint
    from trainers.runtime.run_reader import RunReader
    from trainers.runtime.errors import TrainerInputError
    from trainers.export.config import ExportModelConfig
    from trainers.export.merged import export_model
    from trainers.modeling.models import load_model
    from trainers.watch.loop import IncrementCounter

    th.set_threads()
    model = get_peft_model(load_model(str(tiny_dir), device=torch.device("cpu")),
                           LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    folder = tmp_path / "watch-run"
    for step in (1, 2):
        checkpoint.save(folder, step, model.save_pretrained, opt, IncrementCounter(step), {"offsets": {}})
    reader = RunReader.open(str(folder), "run")  # what export_model's check_export asks for the weights
    assert reader.weights(None) == (folder / "checkpoints" / "step-00000002" / "weights", 2)
    assert reader.weights(1)[1] == 1
    with pytest.raises(TrainerInputError, match=r"no checkpoint of step 7: it keeps steps \[1, 2\]"):
        reader.weights(7)
    out = tmp_path / "o"
    info = export_model(ExportModelConfig(run=str(folder / "checkpoints" / "step-00000001"), output=str(out)))
    assert info["step"] == 1 and info["lora"] and (out / "model.safetensors").is_file()


def test_bad_runs_and_outputs_are_one_line_errors_that_write_nothing(tiny_dir, tmp_path):
    from trainers.runtime.errors import TrainerInputError
    from trainers.export.config import ExportModelConfig
    from trainers.export.merged import export_model

    out = tmp_path / "out"
    r = _lake("export-model", str(tmp_path / "missing"), "--output", str(out))  # what a user sees: one line, exit 2
    assert r.returncode == 2 and "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainerInputError, match="no adapter/ or model/"):
        export_model(ExportModelConfig(run=str(tmp_path / "empty"), output=str(out)))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(TrainerInputError, match="not empty"):
        ExportModelConfig(run=str(tiny_dir), output=str(busy))
    assert (busy / "keep.txt").read_text() == "mine"
    with pytest.raises(TrainerInputError, match="float32 or float16"):
        ExportModelConfig(run=str(tiny_dir), output=str(out), format="gguf", dtype="bfloat16")
    with pytest.raises(TrainerInputError, match="use merged or gguf"):
        ExportModelConfig(run=str(tiny_dir), output=str(out), format="onnx")
    with pytest.raises(TrainerInputError, match="unknown --dtype"):
        ExportModelConfig(run=str(tiny_dir), output=str(out), dtype="int4")
    assert not out.exists() and not list(tmp_path.glob(".out.tmp*"))
