"""GPU check (issue 40): the trainers' own SFT step, GRPO update and generation on CUDA in bf16, each against its
plain baseline measured in the same run, in one short go (under 6 minutes on an H100).

- SFT: our LoRA step (trainers/sft/loop.py's `train_loop`: shared-prefix batches, the label-only head) against
  a plain TRL `SFTTrainer` on the same batches in the same order (LoRA r 16, alpha 32, all-linear, lr 2e-4),
  non-padding tokens/s over the steps after the warm-up;
- GRPO: our update (trainers/rl/grpo.py's `policy_update`) with the group's shared prompt prefix run once
  against the same update on whole sequences, tokens/s;
- generation: our batched generation (trainers/generation/generate.py's `Turns`: the shared prefix once, each
  episode's KV cache kept across its turns) against plain transformers `generate` on the whole conversation at
  every turn, generated tokens/s of multi-turn episodes (greedy; how many episodes came out identical is shown);
- the peak GPU memory of each (torch.cuda.max_memory_allocated; on a CPU the process's resident memory).

Two architectures: SmolLM2-135M's (LlamaConfig) and Qwen2.5-1.5B's (Qwen2Config), built with random weights
unless `--model-dir NAME=PATH` gives real ones (throughput does not depend on the weights; the report says which
was used). The data are synthetic token ids shaped like the environments' conversations: a system prompt + tools
prefix every row shares, then user, assistant, tool and assistant turns (the assistant's tokens labelled).

It imports torch, transformers (and tokenizers, which transformers brings), peft, accelerate through the
trainers, and trl when importable (else the TRL baseline is skipped and the report says why), plus the
product's own model, forward-pass, training-step and generation code: nothing of lake/, ingest/, views/ or envs/
(the import-linter contract "model-code-without-lake", tests/test_gpu_check.py). The trainers need
transformers >= 5.23 (the KV cache keyword is `cache`; 5.17 names it past_key_values, and generation silently
ignores the cache there): on an older one the check stops at once, saying so. bench/gpu/README.md says how to run
it on a GPU machine with the wheels it needs; `--device cpu --quick` runs the same code at toy sizes (the test).

usage: python bench/gpu_check.py [--device auto|cuda|cpu] [--quick] [--out DIR] [--models NAME,NAME]
                                 [--model-dir NAME=PATH] [--deadline S] [--no-trl] [--threads N]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # the product, and the check's parts (bench/gpu/) however it is started
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import transformers  # noqa: E402

# the check's parts (bench/gpu/), which import the product's own model, training-step and generation code (the
# contract "model-code-without-lake" in pyproject.toml lists those modules)
from gpu.frame import ARCHS, MIN_TRANSFORMERS, T0, Run, too_old  # noqa: E402
from gpu.models import Model  # noqa: E402
from gpu.report import card, environment, imports_check, markdown, write  # noqa: E402
from gpu.workloads import generation, grpo, sft  # noqa: E402
from trainers.runtime.device import set_threads, setup_env  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto (cuda when available) | cuda | cuda:N | cpu")
    ap.add_argument("--quick", action="store_true", help="toy sizes: the same code paths in seconds (a CPU test)")
    ap.add_argument("--out", help="folder for gpu_check.json and gpu_check.md (default bench/gpu/<date>-<card>)")
    ap.add_argument("--models", default=",".join(ARCHS), help=f"comma list of {', '.join(ARCHS)}")
    ap.add_argument("--model-dir", action="append", default=[], metavar="NAME=PATH",
                    help="real weights for one of the models (a save_pretrained folder); default random weights")
    ap.add_argument("--deadline", type=float, default=300.0,
                    help="seconds from the start after which the remaining measurements are skipped (and said so)")
    ap.add_argument("--no-trl", action="store_true", help="skip the TRL baseline even where trl imports")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default 1 or $LACHESIS_THREADS)")
    args = ap.parse_args(argv)
    names = [x.strip() for x in args.models.split(",") if x.strip()]
    unknown = [x for x in names if x not in ARCHS]
    if unknown or not names:
        ap.error(f"--models: unknown {unknown}; use {', '.join(ARCHS)}")
    args.models = names
    dirs = {}
    for item in args.model_dir:
        name, sep, path = item.partition("=")
        if not sep or name not in ARCHS or not Path(path).is_dir():
            ap.error(f"--model-dir {item!r}: use NAME=FOLDER with NAME one of {', '.join(ARCHS)} and an existing folder")
        dirs[name] = path
    args.model_dirs = dirs
    return args


def main(argv=None) -> int:
    args = parse(argv)
    setup_env()
    if args.threads or args.device == "cpu":
        set_threads(args.threads)
    run = Run(args)  # imports trl when it is there
    gc.freeze()  # what the imports made stays: each measurement's gc.collect walks only what came after
    env = environment(run)
    date = datetime.now(timezone.utc)
    report = {"check": "gpu_check", "date": date.strftime("%Y-%m-%d %H:%M UTC"), "argv": sys.argv[1:] if argv is None
              else list(argv), "quick": args.quick, "deadline_s": args.deadline, "environment": env,
              "trl_baseline": "run" if run.trl else run.trl_reason, "models": [], "ratios": {}, "skipped": run.skipped,
              "errors": run.errors}
    out = Path(args.out) if args.out else ROOT / "bench" / "gpu" / f"{date:%Y-%m-%d}-{card(env)}"
    print(f"gpu_check on {env.get('gpu') or 'cpu'}: torch {env['torch']}, transformers {env['transformers']}, "
          f"trl {env['trl'] or 'absent'}, {env['dtype']} -> {out}", flush=True)
    if too_old(transformers.__version__):
        why = (f"transformers {transformers.__version__} is older than the {'.'.join(map(str, MIN_TRANSFORMERS))} the "
               "trainers need (their forward passes hand the KV cache over as `cache`, which older versions ignore): "
               "carry the transformers wheel as bench/gpu/README.md says")
        run.errors.append(why)
        report.update(wall_s=round(time.monotonic() - T0, 1), imports=imports_check())
        write(report, out)
        print(why, flush=True)
        return 2
    for name in args.models:
        entry: dict = {"name": name}
        report["models"].append(entry)
        if run.left() <= 0:
            entry.update(kind=ARCHS[name][1], weights="random" if name not in args.model_dirs else "real",
                         skipped="deadline")
            run.skipped.append(f"{name}: the {args.deadline:.0f} s deadline had passed")
            continue
        try:
            m = Model(run, name, args.model_dirs.get(name))
        except Exception as exc:
            msg = f"{type(exc).__name__}: {str(exc)[:300]}"
            run.errors.append(f"{name}: {msg}")
            entry.update(kind=name, weights="?", error=msg)
            continue
        entry.update(kind=m.kind, weights=m.weights, architecture={k: getattr(m.config, k, None) for k in (
            "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "tie_word_embeddings")})
        entry["sft"] = sft(run, m)
        entry["grpo"] = grpo(run, m)
        entry["generation"] = generation(run, m)
        report["ratios"][name] = {"sft_ours_vs_trl": entry["sft"]["ratio"],
                                  "grpo_shared_prefix_vs_whole": entry["grpo"]["ratio"],
                                  "generation_ours_vs_plain": entry["generation"]["ratio"]}
        write({**report, "wall_s": round(time.monotonic() - T0, 1), "imports": imports_check()}, out)  # so far
    report.update(wall_s=round(time.monotonic() - T0, 1), imports=imports_check())
    write(report, out)
    print(markdown(report), flush=True)
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}", flush=True)
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())

