"""SmolLM2-135M-Instruct on this machine: batched greedy generation tokens/s, SFT tokens/s and LoRA step time, each
against a baseline measured in the same run.

Generation: the first prompts of 8 bash_exec_env test tasks as hermes_eval builds them (our ChatML, the tools
block in the system prompt), greedy, up to 32 new tokens, stopping at <|im_end|>. Ours = one left-padded batch through trainers.generation.generate (hermes_eval's
path, KV cache); baseline = plain transformers `model.generate` one prompt at a time. Tokens/s counts the tokens
each prompt produced (up to and including <|im_end|>), the same work for both; the outputs are compared. The
batched prompt pass (one new token) is timed too: with ~230-token prompts it dominates on a CPU, so decode
tokens/s is reported beside the end-to-end figure.
SFT: rl_finetune_supervised's training loop (trainers.sft.loop.train_loop: assistant-only labels, shared-prefix batches)
against a plain TRL SFTTrainer (assistant_only_loss, same LoRA, lr, batch and conversations: expert rollouts of
bash_exec_env's train split), both on smollm2 with our ChatML template; bench/bench_sft.py's two sides, reused.
LoRA step: one forward + backward + AdamW step at batch 8 x 128 tokens (r=16, alpha=32, all-linear: the trainers'
LoRA defaults), median over the timed steps after one warm-up; baseline = the same step on the tiny model.

usage: python bench/bench_smollm2.py [--threads 1] [--prompts 8] [--new-tokens 32] [--batch 8] [--seq 128] [--steps 3]
                                     [--sft-examples 16] [--skip lora,sft,generation]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

def prompts(tok, n: int) -> list[list[int]]:
    """hermes_eval's own first prompts of the first n bash_exec_env test tasks (system prompt, tools, instruction)."""
    import envs
    from trainers.generation.episodes import Episode

    out = []
    for i, task in enumerate(envs.load_tasks("bash_exec_env", "test")[:n]):
        env = envs.make("bash_exec_env")
        out.append(Episode(env, task.task_id, i, tok).ids)
        env.close()
    return out


def generation(path: str, args) -> dict:
    import torch

    from trainers.generation.generate import Sampling, generate
    from trainers.modeling.models import load_model, load_tokenizer

    def generate_batch(model, tok, prompts, n):
        return [g.token_ids for g in generate(model, tok, prompts, Sampling(max_new_tokens=n))]

    tok = load_tokenizer(path)
    model = load_model(path).eval()
    ps = prompts(tok, args.prompts)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    generate_batch(model, tok, ps[:2], 4)  # warm-up: first-call allocations out of the timings

    t = time.perf_counter()
    plain = []
    with torch.no_grad():
        for p in ps:
            out = model.generate(input_ids=torch.tensor([p]), max_new_tokens=args.new_tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tok.pad_token_id)
            plain.append(out[0, len(p):].tolist())
    plain_s = time.perf_counter() - t

    t = time.perf_counter()
    batched = generate_batch(model, tok, ps, args.new_tokens)
    batched_s = time.perf_counter() - t

    t = time.perf_counter()
    generate_batch(model, tok, ps, 1)  # the prompt pass alone: on CPU it is most of the batched time
    prefill_s = time.perf_counter() - t

    tokens = sum(len(o) for o in batched)
    return {"prompts": len(ps), "prompt_tokens_mean": round(statistics.mean(len(p) for p in ps)),
            "new_tokens": tokens, "same_outputs": sum(a == b for a, b in zip(plain, batched)),
            "one_at_a_time_s": round(plain_s, 2), "batched_s": round(batched_s, 2),
            "one_at_a_time_tokens_per_s": round(sum(len(o) for o in plain) / plain_s, 1),
            "batched_tokens_per_s": round(tokens / batched_s, 1),
            "speedup": round(plain_s / batched_s, 2), "batched_prompt_pass_s": round(prefill_s, 2),
            # None when the timings are too noisy to separate (a loaded machine: the prompt pass alone took longer)
            "batched_decode_tokens_per_s": round((tokens - len(ps)) / (batched_s - prefill_s), 1)
            if batched_s > prefill_s else None}


def sft(path: str, args) -> dict:
    """Our SFT loop vs plain TRL SFTTrainer on the same smollm2 conversations, one epoch each (same steps)."""
    import bench_sft  # bench/bench_sft.py, beside this script: its two sides, unchanged

    ns = argparse.Namespace(data=None, examples=args.sft_examples, epochs=1.0, batch_size=args.batch, max_length=1024,
                            full=False, template="chatml")
    convs, src = bench_sft.conversations(ns)
    trl = bench_sft.trl_plain(path, convs, ns)
    ours = bench_sft.ours(path, convs, src, ns)
    return {"conversations": len(convs), "batch": args.batch, "ours": ours, "trl": trl,
            "ours_tokens_per_s": round(ours["tokens_per_s"], 1), "trl_tokens_per_s": round(trl["tokens_per_s"], 1),
            "ratio": round(ours["tokens_per_s"] / trl["tokens_per_s"], 2),
            "same_label_tokens": ours["label_tokens_per_epoch"] == trl["label_tokens_per_epoch"]}


def lora_step(path: str, args) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model

    from trainers.modeling.models import load_model, load_tokenizer

    tok = load_tokenizer(path)
    torch.manual_seed(0)
    model = get_peft_model(load_model(path), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                        task_type="CAUSAL_LM"))
    text = [t for p in prompts(tok, args.batch) for t in p]
    rows = [(text[i * 37:] + text)[: args.seq] for i in range(args.batch)]  # real prompt tokens, different windows
    ids = torch.tensor(rows)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    times, losses = [], []
    for _ in range(args.steps + 1):
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t)
        losses.append(round(loss.item(), 3))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"batch": list(ids.shape), "trainable": trainable, "step_s_median": round(statistics.median(times[1:]), 3),
            "first_step_s": round(times[0], 3), "losses": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("LACHESIS_THREADS", "1")))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sft-examples", type=int, default=16, help="conversations of the SFT comparison (one epoch)")
    ap.add_argument("--skip", default="", help="comma list of sections to leave out: generation, sft, lora")
    ap.add_argument("--json-out", help="also write the summary with date, machine and load here")
    args = ap.parse_args()
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}

    from trainers.runtime.device import set_threads
    from trainers.modeling.pretrained import smollm2_path
    from trainers.modeling.tiny import tiny_model_path

    set_threads(args.threads)
    t = time.perf_counter()
    smol = str(smollm2_path())
    prepare_s = time.perf_counter() - t
    tiny = str(tiny_model_path())
    load = os.getloadavg()
    summary = {"bench": "summary", "threads": args.threads, "cache_ready_s": round(prepare_s, 2),
               "load_avg_1m_start": round(load[0], 2)}
    if "generation" not in skip:
        gen = generation(smol, args)
        print(json.dumps({"bench": "generation", "model": "smollm2", **gen}), flush=True)
        summary.update(generation_batched_tokens_per_s=gen["batched_tokens_per_s"],
                       generation_one_at_a_time_tokens_per_s=gen["one_at_a_time_tokens_per_s"],
                       generation_batched_vs_one_at_a_time=gen["speedup"])
    if "sft" not in skip:
        res = sft(smol, args)
        print(json.dumps({"bench": "sft", "model": "smollm2", **res}), flush=True)
        summary.update(sft_ours_tokens_per_s=res["ours_tokens_per_s"], sft_trl_tokens_per_s=res["trl_tokens_per_s"],
                       sft_ours_vs_trl=res["ratio"])
    if "lora" not in skip:
        step = lora_step(smol, args)
        print(json.dumps({"bench": "lora_step", "model": "smollm2", **step}), flush=True)
        base = lora_step(tiny, args)
        print(json.dumps({"bench": "lora_step", "model": "tiny", **base}), flush=True)
        summary.update(lora_step_s=step["step_s_median"],
                       lora_step_vs_tiny=round(step["step_s_median"] / base["step_s_median"], 1))
    summary["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(summary))
    if args.json_out:
        bench_json.write(args.json_out, "smollm2", summary)


if __name__ == "__main__":
    main()
