"""SFT: assistant-only labels, learning, adapter round trip, run folder, lake event, bad input."""
from __future__ import annotations

import json

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def _assistant_char_spans(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    head = "<|im_start|>assistant\n"
    while (i := text.find(head, pos)) >= 0:
        start = i + len(head)
        end = text.index("<|im_end|>", start) + len("<|im_end|>")
        spans.append((start, end))
        pos = end
    return spans


def test_labels_cover_exactly_the_assistant_tokens(tiny_dir):
    from transcript.messages import template_messages
    from trainers.modeling.models import load_tokenizer
    from trainers.modeling.forward import IGNORE
    from trainers.modeling.batches import encode_conversation

    tok = load_tokenizer(str(tiny_dir))
    row = th.tool_chats(1, seed=3)[0]
    conv = {"messages": template_messages(row["messages"]), "tools": row["tools"]}
    ids, labels = encode_conversation(tok, conv)
    # independent expectation: character spans of the assistant turns in the rendered text -> tokens by offsets
    text = tok.apply_chat_template(conv["messages"], tools=conv["tools"], tokenize=False)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert enc["input_ids"] == ids
    spans = _assistant_char_spans(text)
    assert len(spans) == 2
    expected = [any(s <= a and b <= e for s, e in spans) for a, b in enc["offset_mapping"]]
    got = [l != IGNORE for l in labels]
    assert got == expected
    assert all(l == t for l, t in zip(labels, ids) if l != IGNORE)
    cmd = json.loads(row["messages"][2]["tool_calls"][0]["arguments"])["command"]
    want = ('<tool_call>\n{"name": "run", "arguments": {"command": ' + json.dumps(cmd) + '}}\n</tool_call><|im_end|>'
            'Done.\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>')
    assert tok.decode([t for t, l in zip(ids, labels) if l != IGNORE]) == want
    # nothing of the system prompt, the tools block, the user turn or the tool result is trained on
    assert "<tools>" not in tok.decode([t for t, l in zip(ids, labels) if l != IGNORE])


def test_sft_lowers_loss_saves_adapter_that_reproduces_logits(tiny_dir, tmp_path):
    import torch

    from lake import Lake
    from trainers.sft.config import SFTConfig
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(64))
    lake = tmp_path / "lake"
    Lake.init(lake)
    s = SFTConfig(model=str(tiny_dir), data=str(data), output=str(tmp_path / "run"), max_steps=30, batch_size=8,
                  full=False, learning_rate=3e-3, warmup_steps=3, lake_root=str(lake), progress=False, log_every=5)
    summary = run_sft(s)
    run = tmp_path / "run"
    log = [json.loads(l) for l in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "step" in r]
    assert losses[-1] < 0.8 * losses[0], losses
    for f in ("adapter/adapter_config.json", "adapter/adapter_model.safetensors", "manifest.json", "loss.png", "config.json"):
        assert (run / f).exists(), f
    assert json.loads((run / "manifest.json").read_text())["rows"] == 64
    tok = load_tokenizer(str(run / "adapter"))
    x = tok("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt", add_special_tokens=False)
    reloaded = load_model(str(tiny_dir), str(run / "adapter")).eval()
    base = load_model(str(tiny_dir)).eval()
    with torch.no_grad():
        l_re, l_base = reloaded(**x).logits, base(**x).logits
    assert not torch.allclose(l_re, l_base, atol=1e-4)  # the adapter changed the model
    # runs event in the lake
    tbl = Lake(str(lake)).snapshot().arrow("SELECT run_id, kind, adapter_path FROM runs")
    assert tbl.num_rows == 1 and tbl.column("kind")[0].as_py() == "train"
    assert tbl.column("run_id")[0].as_py() == summary["run_id"]


def test_reloaded_adapter_reproduces_trained_model_logits(tiny_dir, tmp_path):
    import torch

    from transcript.messages import template_messages
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.sft.config import SFTConfig
    from trainers.modeling.batches import encode_all
    from trainers.sft.loop import prepare_model, train_loop

    tok = load_tokenizer(str(tiny_dir))
    convs = [{"messages": template_messages(r["messages"]), "tools": r["tools"]} for r in th.tool_chats(16)]
    examples, _ = encode_all(tok, convs, 512)
    s = SFTConfig(data="-", max_steps=6, batch_size=8, full=False, learning_rate=3e-3, warmup_steps=1, seed=1)
    model, n = prepare_model(load_model(str(tiny_dir)), s)
    assert 0 < n < 200_000  # LoRA: a small fraction of the 0.56 M parameters
    train_loop(model, examples, s, tok.pad_token_id)
    model.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([examples[0][0]])
    reloaded = load_model(str(tiny_dir), str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        a, b = model.eval()(input_ids=ids).logits, reloaded(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5)


def test_full_finetune_writes_a_complete_model(tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(16))
    summary = run_sft(SFTConfig(model=str(tiny_dir), data=str(data), full=True, max_steps=3, batch_size=8,
                                  output=str(tmp_path / "run"), record_in_lake=False, progress=False))
    assert summary["full"] and summary["steps"] == 3 and summary["trainable_params"] > 500_000
    AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model")


@pytest.mark.parametrize("case", ["empty", "no_messages", "test_split_only", "missing_file"])
def test_bad_datasets_are_one_line_errors(tiny_dir, tmp_path, case):
    path = tmp_path / "d.jsonl"
    if case == "empty":
        path.write_text("")
    elif case == "no_messages":
        th.write_jsonl(path, [{"text": "hello"}, {"text": "world"}])
    elif case == "test_split_only":
        th.write_jsonl(path, [{**r, "split": "test"} for r in th.tool_chats(3)])
    else:
        path = tmp_path / "missing.jsonl"
    r = th.run_cli("rl_finetune_supervised", "--model", str(tiny_dir), "--data", str(path), "--no-lake",
                   "--output", str(tmp_path / "run"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert {"empty": "empty", "no_messages": "no `messages`", "test_split_only": "split='train'",
            "missing_file": "does not exist"}[case] in r.stderr
    assert not (tmp_path / "run").exists()  # no half-made run folder


def test_empty_export_folder_is_a_one_line_error(tiny_dir, tmp_path):
    (tmp_path / "export").mkdir()
    r = th.run_cli("rl_finetune_supervised", "--model", str(tiny_dir), "--data", str(tmp_path / "export"), "--no-lake")
    assert r.returncode == 2 and "no .parquet or .jsonl" in r.stderr and "Traceback" not in r.stderr


def test_shared_prefix_batches_give_the_full_sequence_loss_and_gradients(tiny_dir):
    import torch

    from transcript.messages import template_messages
    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.modeling.batches import collate, collate_suffix, encode_all, first_label_pos, shared_prefix_len
    from trainers.modeling.forward import forward_shared_prefix

    tok = load_tokenizer(str(tiny_dir))
    convs = [{"messages": template_messages(r["messages"]), "tools": r["tools"]} for r in th.tool_chats(4, seed=5)]
    examples, _ = encode_all(tok, convs, 1024)
    batch = [0, 1, 2, 3]
    P = shared_prefix_len(examples, batch, [first_label_pos(y) for _, y in examples])
    system_turn = tok.apply_chat_template(convs[0]["messages"][:1], tools=convs[0]["tools"], tokenize=True,
                                          return_dict=True)["input_ids"]
    assert P >= len(system_turn) > 20  # at least the system prompt + tools block is shared
    model = load_model(str(tiny_dir)).train()
    ids, labels, att = collate(examples, batch, tok.pad_token_id)
    full = model(input_ids=ids, attention_mask=att, labels=labels).loss
    full.backward()
    g_full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = forward_shared_prefix(model, *collate_suffix(examples, batch, P, tok.pad_token_id))
    shared.backward()
    assert abs(float(full.detach()) - float(shared.detach())) < 1e-5
    assert max(float((a - p.grad).abs().max()) for a, p in zip(g_full, model.parameters())) < 1e-5


def test_gradient_checkpointing_recomputes_each_layer_and_trains_the_same(tiny_dir, tmp_path):
    """--gradient-checkpointing: each decoder layer runs twice per training pass (forward, then again in the
    backward pass instead of keeping its activations), and the run's losses and weights are those without it
    (without the shared prefix, which checkpointing turns off)."""
    import torch

    from trainers.sft.config import SFTConfig
    from trainers.modeling.models import load_model
    from trainers.sft.loop import prepare_model
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "chats.jsonl", th.tool_chats(16))

    def run(checkpointing: bool):
        calls, held = [0], {}

        def build(s):
            model, n = prepare_model(load_model(str(tiny_dir)), s)
            # a pre-hook inside the checkpointed layer: torch stops a recompute once the saved tensors are back,
            # before the module's forward returns, so a forward (post) hook would not see it
            mlp = model.get_base_model().model.layers[0].mlp
            mlp.register_forward_pre_hook(lambda m, i: calls.__setitem__(0, calls[0] + m.training))
            held["model"] = model
            return model, n

        out = tmp_path / f"run-{checkpointing}"
        run_sft(SFTConfig(model=str(tiny_dir), data=str(data), output=str(out), max_steps=3, batch_size=4,
                          full=False, learning_rate=3e-3, gradient_checkpointing=checkpointing, share_prefix=False,
                          record_in_lake=False, progress=False, plot=False, log_every=1), build_model=build)
        losses = [json.loads(l)["loss"] for l in (out / "train_log.jsonl").read_text().splitlines() if '"step"' in l]
        return calls[0], losses, {k: v.detach().clone() for k, v in held["model"].named_parameters() if "lora_" in k}

    plain_calls, plain_losses, plain_weights = run(False)
    ckpt_calls, ckpt_losses, ckpt_weights = run(True)
    assert plain_calls > 0 and ckpt_calls == 2 * plain_calls
    assert len(plain_losses) == 3 and ckpt_losses == pytest.approx(plain_losses, rel=1e-5)
    assert plain_weights.keys() == ckpt_weights.keys()
    assert all(torch.allclose(plain_weights[k], ckpt_weights[k], atol=1e-6) for k in plain_weights)
