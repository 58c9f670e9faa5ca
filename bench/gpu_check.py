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
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

T0 = time.monotonic()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

# the product's own code (the contract "model-code-without-lake" in pyproject.toml lists these modules)
from trainers.generation.generate import Sampling, Turns, reference_generate, use_bf16  # noqa: E402
from trainers.modeling.forward import IGNORE  # noqa: E402
from trainers.rl.grpo import SampledSequence, policy_update  # noqa: E402
from trainers.runtime.device import device as pick_device  # noqa: E402
from trainers.runtime.device import load_dtype, set_threads, setup_env  # noqa: E402
from trainers.sft.config import SFTConfig  # noqa: E402
from trainers.sft.loop import global_batches, lora_config, prepare_model, train_loop  # noqa: E402

MIN_TRANSFORMERS = (5, 23)  # pyproject.toml's pin: the forward passes hand the KV cache over as `cache`
FORBIDDEN = ("lake", "views", "ingest", "envs", "deltalake", "duckdb")  # never imported here (the GPU image has none)

# the two architectures, as their config.json on the Hub gives them (what throughput depends on)
ARCHS = {
    "smollm2-135m": ("llama", "SmolLM2-135M", dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
        vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True)),
    "qwen2.5-1.5b": ("qwen2", "Qwen2.5-1.5B", dict(
        hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
        vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True)),
}
# --quick: the same classes and code paths at toy sizes (a CPU runs them in seconds)
TOY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
           vocab_size=1024, max_position_embeddings=2048)

# workload sizes, full (a GPU) and quick (a CPU test); tokens per part of a conversation
SIZES = {
    "full": dict(
        sft=dict(batch=8, warmup=3, steps=10, prefix=512, user=64, reply=160, tool=96),
        grpo=dict(group=16, micro=8, warmup=1, steps=3, prefix=512, task=32, reply=128, tool=96),
        gen=dict(episodes=16, turns=3, new=64, prefix=512, task=32, tool=48)),
    "quick": dict(
        sft=dict(batch=4, warmup=1, steps=2, prefix=48, user=8, reply=12, tool=8),
        grpo=dict(group=4, micro=2, warmup=1, steps=1, prefix=32, task=4, reply=8, tool=6),
        gen=dict(episodes=4, turns=2, new=6, prefix=32, task=4, tool=4)),
}
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 (SmolLM2's); pad, bos, end of turn


# ----------------------------------------------------------------------------------------------- the run's frame
class Run:
    """Device, dtype, deadline and the report under construction."""

    def __init__(self, args):
        self.args = args
        self.dev = pick_device(args.device)
        self.gpu = self.dev.type == "cuda"
        self.dtype = load_dtype(self.dev)  # the trainers' rule: bf16 on a GPU that has it, float32 on a CPU
        self.sizes = SIZES["quick" if args.quick else "full"]
        self.skipped: list[str] = []
        self.errors: list[str] = []
        self.trl, self.trl_reason = (None, "--no-trl") if args.no_trl else _import_trl()

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize(self.dev)

    def left(self) -> float:
        return self.args.deadline - (time.monotonic() - T0)

    def fresh(self, collect: bool = True) -> None:
        """Free what the last measurement left (collect), and start counting peak memory anew."""
        if collect:
            gc.collect()  # cheap: main() froze everything the imports made (gc.freeze)
        if self.gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.dev)

    def memory(self) -> dict:
        if self.gpu:
            return {"peak_memory_mib": round(torch.cuda.max_memory_allocated(self.dev) / 2**20, 1)}
        return {"peak_memory_mib": None, "rss_mib": rss_mib()}

    def measure(self, label: str, fn, *a):
        """fn(*a) unless the deadline has passed (then skipped, said so); an error is recorded, never raised."""
        if self.left() <= 0:
            self.skipped.append(f"{label}: the {self.args.deadline:.0f} s deadline had passed")
            print(f"skipped {label}: deadline", flush=True)
            return {"skipped": "deadline"}
        t = time.monotonic()
        self.fresh()
        try:
            out = fn(*a)
        except Exception as exc:  # one failure must not lose the rest of a one-shot GPU run
            msg = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.errors.append(f"{label}: {msg}")
            print(f"error in {label}: {msg}", flush=True)
            out = {"error": msg}
        print(f"{label}: {time.monotonic() - t:.1f} s", flush=True)
        return out


def _import_trl():
    """(trl's SFTConfig, SFTTrainer) or (None, why not)."""
    try:
        from trl import SFTConfig as TRLConfig
        from trl import SFTTrainer
    except Exception as exc:  # ImportError, or a broken dependency (datasets, pyarrow) raising anything else
        return None, f"trl not importable ({type(exc).__name__}: {str(exc)[:200]}): the TRL baseline is skipped"
    return (TRLConfig, SFTTrainer), None


def rss_mib() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return v(name)
    except PackageNotFoundError:
        return None


def too_old(v: str) -> bool:
    nums = [int(x) for x in re.findall(r"\d+", v)[:2]]
    return tuple(nums) < MIN_TRANSFORMERS


# ----------------------------------------------------------------------------------------------- models
class Model:
    """One architecture: how to build a fresh copy of it (random weights, seeded, or from --model-dir)."""

    def __init__(self, run: Run, name: str, path: str | None):
        from transformers import AutoConfig

        self.run, self.name, self.path = run, name, path
        if path:
            self.config = AutoConfig.from_pretrained(path)
            self.tok = _load_tokenizer(path)
            self.kind = f"real weights from {path} ({self.config.model_type})"
        else:
            model_type, label, dims = ARCHS[name]
            dims = {**dims, **TOY} if run.args.quick else dims
            self.config = AutoConfig.for_model(model_type, **dims)
            self.tok = synthetic_tokenizer(self.config.vocab_size)
            scale = " toy-scaled (--quick)" if run.args.quick else ""
            self.kind = (f"random weights, {label}'s architecture{scale} ({type(self.config).__name__}: hidden "
                         f"{dims['hidden_size']}, {dims['num_hidden_layers']} layers, {dims['num_attention_heads']} "
                         f"heads, {dims['num_key_value_heads']} kv heads, intermediate {dims['intermediate_size']}, "
                         f"vocab {dims['vocab_size']})")
        self.weights = "real" if path else "random"
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(self.eos, int) or self.eos == self.tok.unk_token_id:
            self.eos = self.tok.eos_token_id
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self.vocab = int(self.config.vocab_size)

    def build(self):
        """A fresh copy on the device in the run's dtype (seeded: every copy of a random model is the same)."""
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        if self.path:
            return AutoModelForCausalLM.from_pretrained(self.path, dtype=self.run.dtype).to(self.run.dev)
        with torch.device(self.run.dev):  # made where it runs: a 1.5B model is not initialised on the CPU first
            model = AutoModelForCausalLM.from_config(self.config, dtype=self.run.dtype)
        return model.to(self.run.dev)

    def ids(self, rng: random.Random, n: int) -> list[int]:
        """n random ordinary token ids (never a special one)."""
        return [rng.randrange(16, self.vocab) for _ in range(n)]


def synthetic_tokenizer(vocab_size: int):
    """A word-level tokenizer of `vocab_size` tokens whose first three are SmolLM2's special tokens: what the
    trainers and TRL ask of a tokenizer (pad and end-of-turn ids, a vocabulary) when no weights are on disk."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(len(SPECIAL), vocab_size)}
    vocab.update({s: i for i, s in enumerate(SPECIAL)})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL[0]))
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=SPECIAL[0], unk_token=SPECIAL[0],
                                   bos_token=SPECIAL[1], eos_token=SPECIAL[2])


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


# ----------------------------------------------------------------------------------------------- SFT
def sft_examples(m: Model, z: dict, n: int) -> list[tuple[list[int], list[int]]]:
    """n conversations as (input_ids, labels): a shared system + tools prefix, a user turn, an assistant reply
    (labelled, with its end-of-turn token), a tool result, a second reply (labelled)."""
    rng = random.Random(1)
    prefix = m.ids(rng, z["prefix"])
    out = []
    for _ in range(n):
        ids = prefix + m.ids(rng, rng.randint(z["user"] // 2, z["user"]))
        labels = [IGNORE] * len(ids)
        for part in ("reply", "tool", "reply"):
            toks = m.ids(rng, rng.randint(z[part] // 2, z[part]))
            if part == "reply":
                toks.append(m.eos)
            ids += toks
            labels += toks if part == "reply" else [IGNORE] * len(toks)
        out.append((ids, labels))
    return out


def sft_config(z: dict, device: str) -> SFTConfig:
    return SFTConfig(data="synthetic", max_steps=z["warmup"] + z["steps"], batch_size=z["batch"], learning_rate=2e-4,
                     full=False, warmup_steps=0, seed=0, log_every=1, share_prefix=True, device=device,
                     record_in_lake=False, progress=False, plot=False)


def _window(tokens_at: list[int], times: list[float], warmup: int) -> dict:
    """tokens/s over the steps after the warm-up, from each step's cumulative tokens and end time."""
    tokens = tokens_at[-1] - tokens_at[warmup - 1]
    secs = times[-1] - times[warmup - 1]
    return {"tokens": tokens, "seconds": round(secs, 4), "tokens_per_s": round(tokens / max(secs, 1e-9), 1)}


def sft_ours(run: Run, m: Model, examples, z: dict) -> dict:
    s = sft_config(z, str(run.dev))
    model, trainable = prepare_model(m.build(), s)
    recs: list[dict] = []
    train_loop(model, examples, s, m.pad, on_log=recs.append)  # a step's loss is read back: it ends synchronised
    out = _window([r["tokens"] for r in recs], [r["elapsed_s"] for r in recs], z["warmup"])
    out.update(run.memory(), loss_step1=round(recs[0]["loss"], 4), trainable_parameters=trainable,
               steps_timed=z["steps"], what="trainers.sft.loop.train_loop (LoRA, shared-prefix batches)")
    del model
    return out


def sft_trl(run: Run, m: Model, examples, z: dict) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    TRLConfig, SFTTrainer = run.trl
    s = sft_config(z, str(run.dev))
    n = z["warmup"] + z["steps"]
    batches = [b for _, b in zip(range(n), global_batches(examples, s, 1))]  # ours, in our order
    rows = [examples[i] for b in batches for i in b]
    ds = Dataset.from_list([{"input_ids": x, "labels": y} for x, y in rows])
    kw = dict(output_dir=tempfile.mkdtemp(prefix="gpu_check_trl_"), per_device_train_batch_size=z["batch"],
              max_steps=n, learning_rate=2e-4, warmup_steps=0, logging_steps=1, save_strategy="no",
              report_to="none", bf16=run.dtype == torch.bfloat16, fp16=False, gradient_checkpointing=False,
              dataloader_pin_memory=run.gpu, dataloader_num_workers=0, max_length=max(len(x) for x, _ in rows),
              seed=0, disable_tqdm=True, use_cpu=not run.gpu)
    fields = getattr(TRLConfig, "__dataclass_fields__", {})
    same_order = "train_sampling_strategy" in fields  # transformers >= 5.2: a sequential sampler, our order
    if same_order:
        kw["train_sampling_strategy"] = "sequential"
    cfg = TRLConfig(**kw)

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_train_begin(self, args, state, control, **_):
            run.sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **_):
            run.sync()
            self.times.append(time.perf_counter() - self.t0)

    clock = Clock()
    trainer = SFTTrainer(model=m.build(), args=cfg, train_dataset=ds, processing_class=m.tok,
                         peft_config=lora_config(s), callbacks=[clock])
    trainer.remove_callback(PrinterCallback)  # no log line per step (logging_steps=1 for the first step's loss)
    trainer.train()
    cum, total = [], 0
    for b in batches:
        total += sum(len(examples[i][0]) for i in b)
        cum.append(total)
    out = _window(cum, clock.times, z["warmup"])
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    out.update(run.memory(), loss_step1=round(losses[0], 4) if losses else None, steps_timed=z["steps"],
               batches="the same batches in the same order" if same_order else
               "the same rows in a random order (this transformers has no train_sampling_strategy)",
               what="trl.SFTTrainer, peft_config LoRA r 16 alpha 32 all-linear, bf16 when the GPU has it")
    del trainer
    return out


def sft(run: Run, m: Model) -> dict:
    z = run.sizes["sft"]
    examples = sft_examples(m, z, z["batch"] * (z["warmup"] + z["steps"]))
    res = {"workload": {**z, "rows": len(examples), "mean_tokens_per_row": round(
        sum(len(x) for x, _ in examples) / len(examples), 1)}}
    res["ours"] = run.measure(f"{m.name} sft ours", sft_ours, run, m, examples, z)
    if run.trl is None:
        res["trl"] = {"skipped": run.trl_reason}
        run.skipped.append(f"{m.name} sft trl: {run.trl_reason}")
    else:
        res["trl"] = run.measure(f"{m.name} sft trl", sft_trl, run, m, examples, z)
    res["ratio"] = ratio(res["ours"], res["trl"])
    return res


# ----------------------------------------------------------------------------------------------- GRPO update
def grpo_rollouts(m: Model, z: dict) -> list[SampledSequence]:
    """A group of two-turn rollouts of one task: the shared prompt, each rollout's own reply (sampled), the tool's
    result, a second reply (sampled); advantages +1 / -1 so every rollout is trained."""
    rng = random.Random(2)
    prompt = m.ids(rng, z["prefix"]) + m.ids(rng, z["task"])
    out = []
    for g in range(z["group"]):
        ids, mask = list(prompt), [0] * len(prompt)
        for part in ("reply", "tool", "reply"):
            toks = m.ids(rng, rng.randint(z[part] // 2, z[part]))
            if part == "reply":
                toks.append(m.eos)
            ids += toks
            mask += [1 if part == "reply" else 0] * len(toks)
        out.append(SampledSequence(ids, mask, advantage=1.0 if g % 2 == 0 else -1.0))
    return out


def grpo(run: Run, m: Model) -> dict:
    z = run.sizes["grpo"]
    rollouts = grpo_rollouts(m, z)
    res = {"workload": {**z, "tokens_per_update": sum(len(r.ids) for r in rollouts)}}
    state: dict = {}

    def update(share: bool) -> dict:
        if "model" not in state:
            s = sft_config(run.sizes["sft"], str(run.dev))
            state["model"], _ = prepare_model(m.build(), s)
            state["params"] = [p for p in state["model"].parameters() if p.requires_grad]
            state["opt"] = torch.optim.AdamW(state["params"], lr=1e-5)
        model, params, opt = state["model"], state["params"], state["opt"]
        bf16 = use_bf16("auto", run.dev)  # online RL's rule (--bf16 auto): autocast where the device has bf16

        def once():
            stats, _ = policy_update(model, params, opt, rollouts, m.pad, z["micro"], bf16=bf16, share_prefix=share,
                                     tis_cap=0.0)
            run.sync()
            return stats

        for _ in range(z["warmup"]):
            once()
        run.fresh(collect=False)
        t = time.perf_counter()
        tokens = shared = 0
        for _ in range(z["steps"]):
            stats = once()
            tokens += stats.tokens
            shared += stats.shared_tokens
        secs = time.perf_counter() - t
        return {"tokens": tokens, "seconds": round(secs, 4), "tokens_per_s": round(tokens / max(secs, 1e-9), 1),
                **run.memory(), "shared_prefix_tokens": shared, "updates_timed": z["steps"], "autocast_bf16": bf16,
                "what": f"trainers.rl.grpo.policy_update(share_prefix={share})"}

    res["shared_prefix"] = run.measure(f"{m.name} grpo shared prefix", update, True)
    res["whole_sequences"] = run.measure(f"{m.name} grpo whole sequences", update, False)
    state.clear()
    res["ratio"] = ratio(res["shared_prefix"], res["whole_sequences"])
    return res


# ----------------------------------------------------------------------------------------------- generation
def episodes(m: Model, z: dict, turns) -> tuple[int, list[list[int]]]:
    """Multi-turn episodes through `turns(prompts) -> replies`: each turn's prompt is the last one + the reply +
    the tool's result (as an environment appends it). (generated tokens, each episode's final ids)."""
    rng = random.Random(3)
    prefix = m.ids(rng, z["prefix"])
    convs = [prefix + m.ids(rng, z["task"]) for _ in range(z["episodes"])]
    generated = 0
    for _ in range(z["turns"]):
        replies = turns(convs)
        generated += sum(len(r) for r in replies)
        convs = [c + r + m.ids(rng, z["tool"]) for c, r in zip(convs, replies)]
    return generated, convs


def generation(run: Run, m: Model) -> dict:
    z = run.sizes["gen"]
    res = {"workload": {**z, "greedy": True}}
    model = None
    try:
        model = m.build().eval()
        finals: dict = {}

        def ours() -> dict:
            def play(zz):
                t = Turns(model, m.tok, Sampling(max_new_tokens=zz["new"]))
                keys = list(range(zz["episodes"]))
                return episodes(m, zz, lambda prompts: [g.token_ids for g in t(prompts, keys)])
            return timed(play, "ours")

        def plain() -> dict:
            def play(zz):
                return episodes(m, zz, lambda prompts: reference_generate(model, m.tok, prompts, zz["new"]))
            return timed(play, "plain")

        def timed(play, key) -> dict:
            play({**z, "episodes": 2, "turns": 1, "new": 2})  # warm-up
            run.fresh(collect=False)
            t = time.perf_counter()
            n, convs = play(z)
            run.sync()
            secs = time.perf_counter() - t
            finals[key] = convs
            what = ("trainers.generation.generate.Turns (shared prefix once, KV cache kept across turns)" if key == "ours"
                    else "transformers generate on the whole conversation each turn (generate.reference_generate)")
            return {"generated_tokens": n, "seconds": round(secs, 4), "tokens_per_s": round(n / max(secs, 1e-9), 1),
                    **run.memory(), "what": what}

        res["ours"] = run.measure(f"{m.name} generation ours", ours)
        res["plain"] = run.measure(f"{m.name} generation plain", plain)
        if "ours" in finals and "plain" in finals:
            same = sum(a == b for a, b in zip(finals["ours"], finals["plain"]))
            res["identical_episodes"] = f"{same}/{len(finals['ours'])}"
    finally:
        model = None  # noqa: F841  (the closures above hold it: freed here, before the next model is built)
        run.fresh()
    res["ratio"] = ratio(res.get("ours", {}), res.get("plain", {}))
    return res


# ----------------------------------------------------------------------------------------------- report
def ratio(a: dict, b: dict) -> float | None:
    x, y = a.get("tokens_per_s"), b.get("tokens_per_s")
    return round(x / y, 3) if x and y else None


def environment(run: Run) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__,
           **{k: version(k) for k in ("peft", "accelerate", "trl", "datasets", "tokenizers", "safetensors")},
           "device": str(run.dev), "dtype": str(run.dtype).removeprefix("torch."), "threads": torch.get_num_threads()}
    if run.gpu:
        p = torch.cuda.get_device_properties(run.dev)
        env.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}")
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def card(env: dict) -> str:
    name = env.get("gpu") or "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "gpu"


def imports_check() -> dict:
    loaded = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in FORBIDDEN and sys.modules[k]})
    ours = sorted(k for k in sys.modules if k.startswith("trainers.") and sys.modules[k] is not None)
    return {"forbidden_loaded": loaded, "product_modules": ours}


def fmt(x) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def mem(d: dict) -> str:
    if d.get("peak_memory_mib") is not None:
        return f"{d['peak_memory_mib'] / 1024:.2f} GiB"
    return f"RSS {d['rss_mib'] / 1024:.2f} GiB" if d.get("rss_mib") else "n/a"


def cell(d: dict, label: str) -> str:
    if "skipped" in d:
        return f"{label}: skipped ({d['skipped']})"
    if "error" in d:
        return f"{label}: error ({d['error'][:80]})"
    return f"{label} {fmt(d.get('tokens_per_s'))}"


def markdown(report: dict) -> str:
    env = report["environment"]
    where = env.get("gpu") or f"CPU ({env.get('cpu')}, {env['threads']} threads)"
    lines = [f"# GPU check: {where}, {report['date']}", "",
             f"`python bench/gpu_check.py {' '.join(report['argv'])}`: {report['wall_s']:.0f} s in all. torch "
             f"{env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, peft {env['peft']}, trl "
             f"{env['trl'] or 'absent'}{'' if report['trl_baseline'] == 'run' else ' (TRL baseline not run)'}; "
             f"{env['dtype']}. Each ratio is ours / the baseline measured in the same run (higher is better); peak "
             "memory is torch.cuda.max_memory_allocated (on a CPU the resident memory after the measurement).", "",
             "| model | workload | ours | baseline | ratio | peak memory ours / baseline |",
             "|---|---|---|---|---|---|"]
    for m in report["models"]:
        label = f"{m['name']} ({m['weights']} weights)"
        if "error" in m or "skipped" in m:
            lines.append(f"| {label} | all | {m.get('error') or m.get('skipped')} | | | |")
            continue
        s, g, n = m.get("sft", {}), m.get("grpo", {}), m.get("generation", {})
        rows = [
            ("SFT step (LoRA), tokens/s", s, "ours", "trl", "ours", "TRL SFTTrainer"),
            ("GRPO update, tokens/s", g, "shared_prefix", "whole_sequences", "shared prefix", "whole sequences"),
            ("generation, " + (f"{n['workload']['episodes']} episodes x {n['workload']['turns']} turns, " if n else "")
             + "generated tokens/s" + (f" ({n['identical_episodes']} identical)" if n.get("identical_episodes") else ""),
             n, "ours", "plain", "shared prefix + KV across turns", "transformers generate per turn"),
        ]
        for what, d, a, b, la, lb in rows:
            if not d:
                continue
            r = d.get("ratio")
            lines.append(f"| {label} | {what} | {cell(d.get(a, {}), la)} | {cell(d.get(b, {}), lb)} | "
                         f"{f'**{r:.2f}x**' if r else 'n/a'} | {mem(d.get(a, {}))} / {mem(d.get(b, {}))} |")
    lines.append("")
    for m in report["models"]:
        lines.append(f"- {m['name']}: {m['kind']}")
    if report["skipped"]:
        lines += ["", "Skipped: " + "; ".join(report["skipped"]) + "."]
    if report["errors"]:
        lines += ["", "Errors: " + "; ".join(report["errors"]) + "."]
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu_check.md").write_text(markdown(report))


# ----------------------------------------------------------------------------------------------- main
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
