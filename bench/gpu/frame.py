"""The run's frame: what is measured at which size, the device and dtype, the deadline, peak memory, and one
measurement's failure recorded instead of raised."""
from __future__ import annotations

import gc
import os
import re
import time

import torch

from trainers.runtime.device import device as pick_device
from trainers.runtime.device import load_dtype

T0 = time.monotonic()  # the deadline counts from the first import of the check
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


