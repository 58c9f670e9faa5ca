"""SFT tokens/s: rl_finetune_supervised's training path vs a plain TRL SFTTrainer script, same data and model,
same run.

Both train the cached tiny Llama with the default LoRA (r=16, alpha=32, all-linear), batch 16, lr 2e-4,
assistant-only loss, on the same conversations (expert rollouts of bash_exec_env's train split unless --data
is given) for the same number of examples. Tokens/s counts non-padding tokens fed to the model during
training; tokenisation is timed separately. Prints the ratio ours / TRL (target >= 1.0x).

usage: python bench/bench_sft.py [--data FILE_OR_FOLDER] [--examples 256] [--epochs 1] [--threads 1] [--full]
                                [--template tiny|chatml]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def conversations(args):
    from trainers.sft.data import conversations as to_convs, load_rows

    if args.data:
        rows, _, src = load_rows(args.data)
    else:
        from trainers.generation.rollouts import conversations_of, policy_rows

        rows = conversations_of(policy_rows("bash_exec_env", "train", args.examples, policy="expert", seed=0))
        src = "bash_exec_env expert rollouts (train split)"
    convs, _ = to_convs(rows, src, "all")
    return convs[: args.examples], src


def ours(model_path, convs, src, args, share_prefix=True):
    import torch

    from trainers.modeling.models import load_model, load_tokenizer
    from trainers.sft.config import SFTConfig
    from trainers.modeling.batches import encode_all
    from trainers.sft.loop import prepare_model, train_loop

    tok = load_tokenizer(model_path, "chatml" if args.template == "chatml" else None)
    t = time.perf_counter()
    examples, _ = encode_all(tok, convs, args.max_length)
    tok_s = time.perf_counter() - t
    s = SFTConfig(data=src, epochs=args.epochs, batch_size=args.batch_size,
                  learning_rate=2e-4 if not args.full else 1e-3, full=args.full, warmup_steps=0, seed=0,
                  log_every=10_000, share_prefix=share_prefix)
    torch.manual_seed(0)
    model, trainable = prepare_model(load_model(model_path), s)
    m = train_loop(model, examples, s, tok.pad_token_id)
    label = sum(sum(1 for l in y if l != -100) for _, y in examples)
    return {"tokens": m["tokens"], "train_s": m["train_s"], "tokens_per_s": m["tokens"] / m["train_s"],
            "tokenize_s": tok_s, "steps": m["steps"], "final_loss": m["final_loss"], "label_tokens_per_epoch": label,
            "trainable": trainable}


def trl_plain(model_path, convs, args):
    import torch
    from datasets import Dataset, Features, Json, List
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from trainers.modeling.chat import CHATML_TEMPLATE, TINY_TEMPLATE

    tok = AutoTokenizer.from_pretrained(model_path)
    tok.chat_template = CHATML_TEMPLATE if args.template == "chatml" else TINY_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    rows = [{"messages": c["messages"], "tools": c["tools"] or []} for c in convs]
    ds = Dataset.from_list(rows, features=Features({"messages": List(Json()), "tools": List(Json())}))
    cfg = SFTConfig(output_dir="/tmp/bench_sft_trl", per_device_train_batch_size=args.batch_size,
                    num_train_epochs=args.epochs, learning_rate=2e-4 if not args.full else 1e-3,
                    max_length=args.max_length, assistant_only_loss=True, logging_steps=10_000, save_strategy="no",
                    report_to="none", bf16=False, activation_checkpointing=False, dataloader_pin_memory=False,
                    include_num_input_tokens_seen="non_padding", seed=0, disable_tqdm=True, use_cpu=True,
                    warmup_steps=0)
    peft = None if args.full else LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0,
                                             task_type="CAUSAL_LM")
    t = time.perf_counter()
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, peft_config=peft)
    tok_s = time.perf_counter() - t
    label = sum(sum(1 for v in x if v != -100) for x in trainer.train_dataset["labels"])
    t = time.perf_counter()
    res = trainer.train()
    train_s = time.perf_counter() - t
    tokens = int(trainer.state.num_input_tokens_seen)
    return {"tokens": tokens, "train_s": train_s, "tokens_per_s": tokens / train_s, "tokenize_s": tok_s,
            "steps": res.global_step, "final_loss": res.training_loss, "label_tokens_per_epoch": label}


def main():
    import datasets

    datasets.disable_progress_bars()
    ap = argparse.ArgumentParser()
    ap.add_argument("--data")
    ap.add_argument("--examples", type=int, default=256)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("LACHESIS_THREADS", "1")))
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--template", choices=["tiny", "chatml"], default="tiny",
                    help="tiny: compact tool signatures (the tiny model's own); chatml: full JSON tools (Hermes-3's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from trainers.modeling.tiny import tiny_model_path

    model_path = str(tiny_model_path())
    convs, src = conversations(args)
    b = trl_plain(model_path, convs, args)
    a = ours(model_path, convs, src, args)
    a0 = ours(model_path, convs, src, args, share_prefix=False)
    ratio = a["tokens_per_s"] / b["tokens_per_s"]
    out = {"bench": "sft_tokens_per_s", "data": src, "template": args.template, "epochs": args.epochs, "examples": len(convs), "threads": args.threads,
           "mode": "full" if args.full else "lora", "ours": a, "ours_no_shared_prefix": a0, "trl": b, "ratio": ratio,
           "ratio_no_shared_prefix": a0["tokens_per_s"] / b["tokens_per_s"],
           "same_label_tokens": a["label_tokens_per_epoch"] == b["label_tokens_per_epoch"]}
    if args.json:
        print(json.dumps(out, indent=2))
    if args.json_out:
        bench_json.write(args.json_out, "sft", out)
    print(f"SFT tokens/s  ours {a['tokens_per_s']:.0f} ({a['tokens']} tokens, {a['train_s']:.1f} s, loss {a['final_loss']:.3f})"
          f"  trl SFTTrainer {b['tokens_per_s']:.0f} ({b['tokens']} tokens, {b['train_s']:.1f} s, loss {b['final_loss']:.3f})"
          f"  ratio {ratio:.2f}x  (label tokens equal: {out['same_label_tokens']})")
    print(f"without shared-prefix batches: ours {a0['tokens_per_s']:.0f} tok/s, ratio {out['ratio_no_shared_prefix']:.2f}x")


if __name__ == "__main__":
    main()
