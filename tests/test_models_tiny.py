"""The tiny model: cached build, save/load round trip, the Hermes ChatML template, model resolution errors."""
from __future__ import annotations

import json
import shutil

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def test_tiny_is_cached_and_loads_through_from_pretrained(tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.modeling.models import resolve_model
    from trainers.modeling.tiny import tiny_model_path

    assert resolve_model("tiny") == str(tiny_dir)
    mtime = (tiny_dir / "model.safetensors").stat().st_mtime
    assert tiny_model_path() == tiny_dir and (tiny_dir / "model.safetensors").stat().st_mtime == mtime  # no rebuild
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (2, 128, 4, 2)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert 900 <= len(tok) <= 1100
    assert tok.padding_side == "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert next(model.parameters()).dtype == torch.float32
    meta = json.loads((tiny_dir / "lachesis_tiny.json").read_text())
    assert meta["splits"] == ["train"]


def test_tokenizer_splits_digits_and_keeps_tool_tokens_atomic(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    pieces = tok.tokenize("file2048.txt")
    assert [p for p in pieces if p.isdigit()] == ["2", "0", "4", "8"]
    assert tok.tokenize("<tool_call>") == ["<tool_call>"]
    ids = tok.encode("<tool_call>x</tool_call>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_template_renders_tools_and_tool_calls_hermes_style(tiny_dir):
    from transcript.messages import template_messages
    from trainers.modeling.models import load_tokenizer

    row = th.tool_chats(1)[0]
    msgs = template_messages(row["messages"])
    for kind in ("tiny", "chatml"):
        tok = load_tokenizer(str(tiny_dir), None if kind == "tiny" else "chatml")
        text = tok.apply_chat_template(msgs, tools=row["tools"], tokenize=False)
        assert text.startswith("<|im_start|>system\nYou operate a shell workspace.\n\n")
        if kind == "tiny":  # compact signatures in <tools>
            assert "<tools>\nrun(command) Run a shell command in the workspace\nsubmit() Finish the task\n</tools>" in text
        else:  # Hermes-3: the full JSON schema of each tool
            assert "<tools>\n" + json.dumps(th.TOOLS[0], ensure_ascii=False) in text
        assert '<|im_start|>assistant\n<tool_call>\n{"name": "run", "arguments": {"command": ' in text
        assert "<|im_start|>tool\n<tool_response>\n" in text
        assert text.endswith('Done.\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>\n')


def test_hermes3_alias_offline_is_a_one_line_error(tiny_dir, tmp_path):
    r = th.run_cli("rl_finetune_supervised", "--model", "hermes-3", "--data",
                   str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(4))), "--no-lake",
                   env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "NousResearch/Hermes-3-Llama-3.1-8B" in r.stderr and "hf download" in r.stderr


def test_model_folder_without_weights_is_a_one_line_error(tiny_dir, tmp_path):
    bad = tmp_path / "noweights"
    shutil.copytree(tiny_dir, bad)
    (bad / "model.safetensors").unlink()
    r = th.run_cli("rl_finetune_supervised", "--model", str(bad), "--data",
                   str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(4))), "--no-lake")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no weights" in r.stderr


def test_tokenizer_without_chat_template_is_a_one_line_error(tiny_dir, tmp_path):
    bad = tmp_path / "notemplate"
    shutil.copytree(tiny_dir, bad)
    (bad / "chat_template.jinja").unlink()
    cfg = json.loads((bad / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bad / "tokenizer_config.json").write_text(json.dumps(cfg))
    r = th.run_cli("rl_finetune_supervised", "--model", str(bad), "--data",
                   str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(4))), "--no-lake")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no chat template" in r.stderr
    assert "--chat-template chatml" in r.stderr


def test_a_resolution_follows_the_sources_pointer_without_building_the_corpus(tiny_dir, monkeypatch):
    """Every process that resolves --model tiny used to rebuild the corpus (a CPU-second) to find the folder: the
    pointer named by the sources' digest is followed instead; a pointer that names no complete tiny folder (a path
    out of the cache, a missing folder) is not, and is rewritten."""
    from trainers.modeling import tiny

    pointer = tiny_dir.parent / f"tiny-sources-{tiny._sources_key()}"
    assert pointer.read_text() == tiny_dir.name

    def no_corpus():
        raise AssertionError("the corpus was built")

    monkeypatch.setattr(tiny, "tiny_corpus", no_corpus)
    assert tiny.tiny_model_path() == tiny_dir
    monkeypatch.undo()
    for hostile in ("../../etc", "tiny-llama-000000000000", ""):
        pointer.write_text(hostile)
        assert tiny.tiny_model_path() == tiny_dir
        assert pointer.read_text() == tiny_dir.name


def test_tiny_corpus_is_packaged_data_only(tiny_dir, tmp_path):
    """A wheel and a checkout build the same tiny model: the corpus comes from the packages alone (here: a copy of
    transcript/, envs/ and trainers/ without the checkout around them gives the same corpus hash)."""
    import hashlib
    import os
    import subprocess
    import sys

    from trainers.modeling.tiny import TINY_VERSION, TINY_CONFIG, tiny_corpus

    texts, info = tiny_corpus()
    want = hashlib.sha256(json.dumps([TINY_VERSION, TINY_CONFIG, texts], ensure_ascii=False).encode()).hexdigest()[:12]
    assert tiny_dir.name == f"tiny-llama-{want}"
    assert set(info["envs"]) == {"bash_exec_env", "git_repo_env", "python_debug_env"} and info["splits"] == ["train"]
    for pkg in ("transcript", "envs", "trainers"):
        shutil.copytree(th.REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import hashlib, json, trainers.modeling.tiny as m; assert m.__file__.startswith(%r), m.__file__; "
            "t, _ = m.tiny_corpus(); print(hashlib.sha256(json.dumps([m.TINY_VERSION, m.TINY_CONFIG, t], "
            "ensure_ascii=False).encode()).hexdigest()[:12])" % str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want
