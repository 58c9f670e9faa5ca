"""`lake serve-model`'s options: one typed dataclass (default and help per field, validated in `__post_init__`).

Kept free of heavy imports (no torch, no fastapi): the CLI builds its options from this class at start-up.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edge.options import ServerOptions, server_field
from trainers.runtime.options import at_least, helped

from .errors import ServingError

RECORD_MODES = ("sync", "async", "off")
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")  # goes into headers and <name>@<step>: no '@', no CR/LF
THREADS_PER_CPU = 4  # --threads at most this many per CPU (100,000 made fork fail across the machine)
ENGINES = ("embedded", "vllm")


@dataclass(kw_only=True)
class ServeModelConfig(ServerOptions):
    """lake serve-model: the trained policy behind an OpenAI-compatible API, every call recorded in the lake. What it
    shares with `lake serve` (where it listens, tokens, Host names, body size, log level, compaction, HTTP limits) is
    edge/options.py's ServerOptions."""

    model: str = field(default="tiny", **helped("tiny | smollm2 | hermes-3 | a local model folder | a hub id"))
    adapter: Optional[str] = field(default=None, **helped(
        "serve this run folder's adapter (its adapter/ or, for --full runs, model/) on the model; with --follow, "
        "until the followed trainer has an increment (`lake train watch --from` the same run)"))
    follow: Optional[str] = field(default=None, **helped(
        "a streaming trainer's folder (runs/<watch-run>): serve its newest increment and swap to each new one "
        "as it is written, without failing requests in flight"))
    promote_if_better: bool = field(default=False, **helped(
        "with --follow: swap only to increments whose --eval-every evaluation (a runs event in the lake) did not "
        "fall below the one served"))
    keep_versions: int = field(default=2, **helped(
        "with --follow: versions kept loaded and addressable by name (<model>@<step>); older ones are unloaded"))
    served_name: Optional[str] = field(default=None, **helped(
        "the name versions are served under (<name>@<step>; a request for <name> gets the newest); default: the "
        "model's alias (tiny, smollm2) or folder name"))
    engine: str = field(default="embedded", **helped(
        "embedded: this process generates with the project's generation path (transformers + peft), concurrent "
        "requests batched together; vllm: a vLLM server generates (started from --vllm-python, or --vllm-url), "
        "each version a LoRA adapter loaded at run time (serving/vllm_engine.py)"))
    vllm_url: Optional[str] = field(default=None, **helped(
        "--engine vllm: a running vLLM server (started with --enable-lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
        "and --served-model-name <name>@base) instead of starting one"))
    vllm_python: Optional[str] = field(default=None, **helped(
        "--engine vllm: the Python that has vllm (default $VLLM_PYTHON, else `just vllm-venv`'s "
        "/tmp/vllm-venv/bin/python)"))
    vllm_dtype: str = field(default="float32", **helped(
        "--engine vllm: the weights' dtype in vLLM (bfloat16, vLLM's CPU default, changed 22 of 32 greedy "
        "SmolLM2 answers)"))
    vllm_max_lora_rank: Optional[int] = field(default=None, **helped(
        "--engine vllm: vLLM's --max-lora-rank (default: the first adapter's rank, else 16; a rank above the "
        "adapters' made vLLM's CPU LoRA 4-5x slower)"))
    vllm_args: str = field(default="", **helped("--engine vllm: more options for the vLLM server we start"))
    port: int = server_field("port", 8001)
    lake_root: Optional[str] = field(default=None, **helped(
        "the lake calls are recorded in (created if missing; default $LAKE_ROOT or ./data/lake)"))
    record: str = field(default="sync", **helped(
        "sync: a response is sent once its call is committed to the lake (group commit); async: recorded in the "
        "background through a bounded queue (a crash loses what is queued); off: nothing recorded"))
    no_record: bool = field(default=False, **helped("record nothing (the same as --record off)"))
    record_queue: int = field(default=1024, **helped(
        "--record async: calls queued for the lake at most; a full queue makes requests wait (back-pressure)"))
    batch_window_ms: float = field(default=10.0, **helped(
        "how long the generation thread gathers concurrent requests into one batch after the first arrives"))
    max_batch: int = field(default=32, **helped("requests generated together at most"))
    max_batch_tokens: int = field(default=32768, **helped(
        "prompt + max_tokens summed over a batch at most: a long request waits for the next batch rather than "
        "grow one padded batch beyond memory"))
    max_tokens: int = field(default=1024, **helped(
        "the largest max_tokens a request may ask for (a larger one is a 400)"))
    default_max_tokens: int = field(default=256, **helped("max_tokens of a request that gives none"))
    kv_cache_tokens: int = field(default=32768, **helped(
        "tokens of recent conversations whose KV cache is kept, so an agent's next call computes only its new "
        "tokens (SmolLM2: ~46 KB per token); 0 keeps none"))
    context: Optional[int] = field(default=None, **helped(
        "longest prompt + max_tokens in tokens (default: the model's max_position_embeddings)"))
    poll_interval: float = field(default=0.25, **helped("--follow: seconds between looks for a new increment"))
    max_body_mb: float = server_field("max_body_mb", 16.0)
    max_messages: int = field(default=4096, **helped(
        "most messages in one chat request (more: a 400): joining a conversation to its trajectory and rendering "
        "it cost time in proportion"))
    seed: int = field(default=0, **helped("seed of sampling for requests without their own seed"))
    threads: Optional[int] = field(default=None, **helped(
        "torch threads (default $LACHESIS_THREADS, else every CPU this process may use)"))
    device: str = field(default="auto", **helped("auto (cuda when available) | cpu | cuda | cuda:N"))
    chat_template: Optional[str] = field(default=None, **helped("chatml (ours, Hermes-style) or a .jinja file"))
    quiet: bool = field(default=False, **helped(
        "no access-log line per request (method, route, status, version, tokens, time); loading, readiness and "
        "each swap are still said"))

    def __post_init__(self):
        from trainers.runtime.device import check_device

        if self.engine not in ENGINES:
            raise ServingError(f"unknown --engine {self.engine!r}: use {' or '.join(ENGINES)}")
        if self.engine != "vllm" and (self.vllm_url or self.vllm_python or self.vllm_args):
            raise ServingError("--vllm-url, --vllm-python and --vllm-args need --engine vllm")
        if self.no_record:
            self.record = "off"
        if self.record not in RECORD_MODES:
            raise ServingError(f"--record must be one of {', '.join(RECORD_MODES)}, not {self.record!r}")
        if self.promote_if_better and not self.follow:
            raise ServingError("--promote-if-better needs --follow runs/<watch-run>")
        if self.follow and Path(self.follow).exists() and not Path(self.follow).is_dir():
            raise ServingError(f"--follow {self.follow}: not a folder (give a streaming trainer's folder, "
                               "runs/<watch-run>)")
        if self.served_name is not None and not SERVED_NAME.fullmatch(self.served_name):
            raise ServingError(f"--served-name {self.served_name!r}: 1-64 letters, digits, '.', '_', ':' or '-', "
                               "starting with a letter or digit")
        cpus = os.cpu_count() or 1
        if self.threads is not None and self.threads > THREADS_PER_CPU * cpus:
            raise ServingError(f"--threads {self.threads} is more than {THREADS_PER_CPU} per CPU "
                               f"({THREADS_PER_CPU * cpus} on this machine)")
        at_least(self, 1, "keep_versions", "record_queue", "max_batch", "max_batch_tokens", "max_tokens",
                 "default_max_tokens", "context", "threads", "vllm_max_lora_rank", "max_messages")
        at_least(self, 0, "batch_window_ms", "kv_cache_tokens")
        if self.poll_interval <= 0:
            raise ServingError("--poll-interval must be positive")
        if self.default_max_tokens > self.max_tokens:
            raise ServingError(f"--default-max-tokens {self.default_max_tokens} is above --max-tokens "
                               f"{self.max_tokens}")
        # the options both servers share (the port, the body size, compaction, the tokens): edge's OptionError
        super().__post_init__()
        self.device = check_device(self.device)
        if self.adapter:  # a missing or foreign folder, pickle weights: the one-line error now, before any model
            from trainers.modeling.models import resolve_adapter

            from trainers.runtime.weights_files import check_weights

            check_weights(resolve_adapter(self.adapter))
