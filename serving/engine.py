"""The embedded engine: the served versions of the policy and one thread that owns them and generates.

Why one thread: a model is not safe to use from two threads at once, and a peft model switches adapters by state;
the thread is also what batches. Requests arrive on a queue; the thread takes the first, gathers whatever else
arrives within `--batch-window-ms` (up to `--max-batch`), and runs one `trainers.generation.generate` call per
version (and per request seed) in that batch, so 32 concurrent agents cost about one batched decode, not 32.
A new version is installed between two decode steps of the batch in flight (generate's `between_steps`), so a swap
waits at most one step, not a whole generation (a 3,000-token answer held one 11-20 s before): the batch's requests
keep generating with the version they were resolved to, whose weights a swap never touches (a LoRA version is copied
into a spare slot or loaded as a new one, never made active; a whole model is read off the engine thread), and a
new version only changes what later requests get. What would touch them waits for the batch's end: the first LoRA
version while the base generates (peft wraps the base model's layers), and unloading the oldest versions beyond
--keep-versions.

Conversations: each call of a conversation (its trajectory id: serving/record.py) keeps its KV cache in the
version's `TurnCache` (trainers/generation/generate.py), so an agent's next call computes only the tokens its tool result and
new turn added, not the whole conversation again; the oldest conversations are dropped beyond `--kv-cache-tokens`.

Versions: `<name>@<step>`. A LoRA adapter is loaded as a named adapter of one peft model over the base (peft's
`load_adapter` / `set_adapter`, so N versions cost N adapters, not N models); a fully fine-tuned model (the tiny
model's increments) is a model of its own. The base model is `<name>@base`.

Swaps are copies, not loads: peft's `load_adapter` builds new LoRA modules in every target layer (SmolLM2: 210
modules, 0.7-1.8 s, on the engine thread, so every request waits), while an adapter slot of the same LoRA config
takes the new weights with one in-place copy per tensor (~10 ms). So the engine keeps one spare slot (built between
batches after the first adapter, and the slot of each unloaded version), the follower reads the new weights and
their sha256 on its own thread, and the engine thread only copies them in (`_prepare` / `_copy_into`).

The engine interface the HTTP layer uses (a second engine, e.g. vLLM, provides the same): `tokenizer`, `context`,
`label`, `versions()`, `resolve(name)`, `await generate(prompt, sampling, version, seed, on_token)`,
`add_version(...)`, `start()`, `close()`. The table of served versions, their names and the interface's errors
are versions.py's, shared with the vLLM engine.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trainers.runtime.device import device as pick_device, set_threads, setup_env, usable_cpus
from trainers.runtime.errors import TrainerInputError
from trainers.generation.generate import Generation, Sampling, TurnCache, generate
from trainers.modeling.models import is_model_folder, load_model, load_tokenizer, resolve_adapter, resolve_model

from .access_log import log
from .config import ServeModelConfig
from .errors import ServingError
from .versions import (GenerationFailed, ServedVersions, Version, VersionGone, check_base, label_of, run_name,
                       weights_sha256)


@dataclass
class _Prepared:
    """A version's weights read off the engine thread: their sha256 and, for a LoRA adapter, its config and tensors
    (a whole model: the model itself, `model`, loaded by add_version)."""

    path: str
    sha256: str
    lora_config: object = None  # peft.LoraConfig, None for a full model
    state_dict: dict | None = None
    model: object = None


def _prepare(path: str) -> _Prepared:
    folder = Path(path)
    sha = weights_sha256(folder)
    if not (folder / "adapter_config.json").is_file():
        return _Prepared(path, sha)
    from peft import LoraConfig
    from peft.utils import load_peft_weights

    try:
        config = LoraConfig.from_pretrained(path)
        weights = load_peft_weights(path, device="cpu")  # safetensors, or a .bin with weights_only
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ServingError(f"{path}: not a readable LoRA adapter ({type(exc).__name__}: {str(exc)[:200]})") from None
    return _Prepared(path, sha, config, weights)


def _same_lora(a, b) -> bool:
    """Two LoRA configs that build the same modules and tensors (a slot of one can hold the other's weights)."""
    keys = ("r", "lora_alpha", "target_modules", "rank_pattern", "alpha_pattern", "use_rslora", "use_dora",
            "fan_in_fan_out", "bias", "layers_to_transform", "modules_to_save", "base_model_name_or_path")
    return all(getattr(a, k, None) == getattr(b, k, None) for k in keys)


@dataclass
class _Job:
    prompt: list[int]
    sampling: Sampling
    version: Version
    seed: int | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    on_token: Callable[[int, float], None] | None  # called on the event loop, in order
    key: str | None  # the conversation (its KV is kept for its next call), None: not kept


class EmbeddedEngine(ServedVersions):
    """The model(s) in this process; see the module docstring."""

    def __init__(self, cfg: ServeModelConfig):
        setup_env()
        self.cfg = cfg
        self.dev = pick_device(cfg.device)
        self.threads = set_threads(cfg.threads, default=usable_cpus())  # a server uses the machine's cores
        import torch

        self.model_path = resolve_model(cfg.model)
        self.label = cfg.served_name or label_of(cfg.model)
        self.tokenizer = load_tokenizer(self.model_path, cfg.chat_template)
        self._generator = torch.Generator(device=self.dev).manual_seed(cfg.seed)
        self._base = None  # the base model, loaded when a version needs it
        self._peft = None  # the peft model holding the LoRA versions (over the base)
        self._versions: OrderedDict[str, Version] = OrderedDict()  # replaced whole (copy on write): readers never lock
        self._spare: list[tuple[str, object]] = []  # (adapter slot name, its LoraConfig): loaded, serving nothing
        self._slots = 0  # adapter slots made so far (their names: slot_<n>)
        self._queue: queue.Queue = queue.Queue()
        self._swaps: deque = deque()  # add_version's installs, run between decode steps (or batches): _run_swaps
        self._trim_due = False  # versions beyond --keep-versions to unload once the batch in flight ends
        self._turns: dict[str, TurnCache] = {}  # per version: the KV of recent conversations
        self._thread: threading.Thread | None = None
        self.context = cfg.context
        self.batches = 0  # generate calls run, for /v1/health and the bench
        self.batched_requests = 0
        self.cancelled_rows = 0  # rows stopped mid-generation because their client went away

    # ------------------------------------------------------------------------------------------- versions
    def load_initial(self, adapter: str | None, follow_step: tuple[str, str] | None) -> Version:
        """The version served from the start (before the thread runs): a followed run's newest increment (step,
        weights folder), else --adapter's (with --follow: until the trainer's first increment), else the base."""
        if follow_step is None and adapter:
            path = resolve_adapter(adapter)
            check_base(path, self.model_path)
            follow_step = (run_name(path), path)
        if follow_step is None:
            return self._install(self._load("base", None))
        v = self._install(self._load(*follow_step))
        if self.cfg.follow:  # increments will follow: their first swap is a copy too
            self._make_spare()
        return v

    def add_version(self, step: str, path: str) -> Version:
        """Load a new version and make it the newest; blocks until it serves. The weights are read here, on the
        caller's thread; the engine's thread installs them between batches. The oldest beyond --keep-versions are
        unloaded (their adapter slot kept as the spare)."""
        ready = _prepare(path)
        if ready.lora_config is None and is_model_folder(Path(path)):  # a whole model: read here too, not in a batch
            ready.model = load_model(path, device=self.dev).eval()
        done: queue.Queue = queue.Queue(maxsize=1)

        def install(generating: Version | None) -> bool:
            """Install it (between steps of a batch generating `generating`, or between batches); False: not now."""
            if generating is not None and not self._swappable(ready, generating):
                return False
            try:
                v = self._install(self._load(step, path, ready))
                if generating is None:
                    self._trim()
                else:  # once the batch ends: unloading may switch the active adapter
                    self._trim_due = True
                done.put(v)
            except BaseException as exc:  # handed to the caller: the engine thread keeps serving
                done.put(exc)
            return True

        self._swaps.append(install)
        self._queue.put(_SWAP)  # wakes an idle engine thread; a busy one takes it between two decode steps
        out = done.get()
        if isinstance(out, BaseException):
            raise out
        if out.kind == "lora" and not self._spare:
            self._queue.put(self._make_spare)  # after the requests already waiting: the next swap is a copy
        return out

    def _swappable(self, ready: "_Prepared", generating: Version) -> bool:
        """Whether installing `ready` leaves the weights of `generating` (the batch in flight) as they are: a whole
        model is a model of its own; a LoRA one goes into a slot of the peft model, never made active, unless the
        base generates (it would be wrapped in LoRA layers, or get a new slot's modules while its adapters are off)."""
        if ready.lora_config is None or generating.kind != "base":
            return True
        return self._peft is not None and any(_same_lora(c, ready.lora_config) for _, c in self._spare)

    def _run_swaps(self, generating: Version | None = None) -> None:
        """Install the new versions waiting, in order (between decode steps of `generating`, or between batches);
        between batches also unload those beyond --keep-versions."""
        while self._swaps:
            if not self._swaps[0](generating):
                return  # after this batch: a later one waits too, so versions come in order
            self._swaps.popleft()
        if generating is None and self._trim_due:
            self._trim_due = False
            self._trim()

    def _load(self, step: str, path: str | None, ready: "_Prepared | None" = None) -> Version:
        name = f"{self.label}@{step}"
        if path is None:
            return Version(name, step, "base", None, None, model=self._base_model())
        ready = ready or _prepare(path)
        if ready.lora_config is not None:
            if self._peft is None:
                from peft import PeftModel

                adapter = self._new_slot_name()
                self._peft = PeftModel.from_pretrained(self._base_model(), path, adapter_name=adapter).eval()
            else:
                adapter = self._copy_into(ready) or self._load_slot(path)
            return Version(name, step, "lora", path, ready.sha256, adapter=adapter)
        if not is_model_folder(Path(path)):
            raise ServingError(f"{path} is neither a LoRA adapter nor a model folder")
        model = ready.model if ready.model is not None else load_model(path, device=self.dev).eval()
        return Version(name, step, "full", path, ready.sha256, model=model)

    def _new_slot_name(self) -> str:
        self._slots += 1
        return f"slot_{self._slots}"  # peft names are module keys: no '.' or '@'

    def _load_slot(self, path: str) -> str:
        adapter = self._new_slot_name()
        self._peft.load_adapter(path, adapter_name=adapter)
        return adapter

    def _copy_into(self, ready: "_Prepared") -> str | None:
        """The new weights copied into the spare slot, if there is one of the same LoRA config; its name, or None."""
        from peft import set_peft_model_state_dict

        for i, (slot, config) in enumerate(self._spare):
            if _same_lora(config, ready.lora_config):
                del self._spare[i]
                result = set_peft_model_state_dict(self._peft, ready.state_dict, adapter_name=slot)
                if result.unexpected_keys:  # a slot must take every tensor: else a version would mix two adapters
                    raise ServingError(f"adapter {ready.path} does not fit its slot: {result.unexpected_keys[:3]}")
                return slot
        return None

    def _make_spare(self) -> None:
        """A slot of the newest adapter's config, loaded from its folder (the weights are overwritten on use)."""
        newest = next((v for v in reversed(self._versions.values()) if v.kind == "lora"), None)
        if newest is None or self._spare:
            return
        try:
            slot = self._load_slot(newest.path)
        except (OSError, ValueError, RuntimeError) as exc:  # the folder went (--keep): the next swap loads instead
            log(f"no spare adapter slot ({type(exc).__name__}: {str(exc)[:200]})")
            return
        self._spare.append((slot, self._peft.peft_config[slot]))

    def _base_model(self):
        if self._base is None:
            self._base = load_model(self.model_path, device=self.dev).eval()
            if self.context is None:
                self.context = int(self._base.config.max_position_embeddings)
        return self._base

    def _install(self, v: Version) -> Version:
        if self.context is None and v.model is not None:
            self.context = int(v.model.config.max_position_embeddings)
        return super()._install(v)

    def _trim(self) -> None:
        versions = OrderedDict(self._versions)
        while len(versions) > self.cfg.keep_versions:
            _, old = versions.popitem(last=False)
            old.gone = True
            self._turns.pop(old.name, None)
            if old.kind == "lora":
                keep = next(v.adapter for v in versions.values() if v.kind == "lora")
                self._peft.set_adapter(keep)
                if self._spare:  # one spare is enough: a swap needs one slot
                    self._peft.delete_adapter(old.adapter)
                else:
                    self._spare.append((old.adapter, self._peft.peft_config[old.adapter]))
            old.model = None
        self._versions = versions

    @contextmanager
    def _active(self, v: Version):
        """The model to generate with for `v`, switched to it."""
        if v.kind == "lora":
            self._peft.set_adapter(v.adapter)
            yield self._peft
        elif v.kind == "base" and self._peft is not None:  # the base under LoRA layers: adapters off
            with self._peft.disable_adapter():
                yield self._peft
        else:
            yield v.model

    # ------------------------------------------------------------------------------------------- requests
    async def generate(self, prompt: list[int], sampling: Sampling, version: Version, seed: int | None = None,
                       on_token: Callable[[int, float], None] | None = None, key: str | None = None) -> Generation:
        """Queue one request for the engine thread and wait for its generation. `on_token(token_id, logprob)` runs
        on the event loop for each token as it is chosen (streaming); `key` names the conversation whose KV the
        call reuses and keeps."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put(_Job(prompt, sampling, version, seed, loop, fut, on_token, key))
        return await fut

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="serve-model-engine", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        window = self.cfg.batch_window_ms / 1000
        carry: _Job | None = None  # the request that did not fit the last batch: first in the next one
        while True:
            self._run_swaps()
            item, carry = (carry, None) if carry is not None else (self._queue.get(), None)
            if item is None:
                return
            if item is _SWAP:
                continue
            if not isinstance(item, _Job):
                item()
                continue
            batch, after = [item], _NOTHING
            tokens = len(item.prompt) + item.sampling.max_new_tokens
            deadline = time.monotonic() + window
            while len(batch) < self.cfg.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _SWAP:  # taken between the decode steps of this batch, or after it
                    continue
                if not isinstance(nxt, _Job):
                    after = nxt  # a command or the stop: after this batch
                    break
                tokens += len(nxt.prompt) + nxt.sampling.max_new_tokens
                if tokens > self.cfg.max_batch_tokens:  # a batch's padded prompts and KV must fit in memory
                    carry = nxt
                    break
                batch.append(nxt)
            self._run_batch(batch)
            if after is None:  # the stop
                return
            self._run_swaps()
            if after is not _NOTHING:
                after()

    def _run_batch(self, batch: list[_Job]) -> None:
        groups: dict[tuple, list[_Job]] = {}
        for job in batch:
            groups.setdefault((job.version.name, job.seed), []).append(job)
        for (_, seed), jobs in groups.items():
            live = [j for j in jobs if not j.future.done()]  # a client that went away: nothing to generate
            if not live:
                continue
            v = live[0].version
            if v.gone:
                for j in live:
                    _settle(j, exc=VersionGone(f"version {v.name} was unloaded before the request ran "
                                               f"(--keep-versions {self.cfg.keep_versions}): retry"))
                continue
            self._generate(v, live, seed)

    def _generate(self, v: Version, jobs: list[_Job], seed: int | None) -> None:
        import torch

        def on_token(row: int, tid: int, lp: float) -> None:
            j = jobs[row]
            if j.on_token is not None:
                j.loop.call_soon_threadsafe(j.on_token, tid, lp)

        generator = torch.Generator(device=self.dev).manual_seed(seed) if seed is not None else self._generator
        cache = self._turns.setdefault(v.name, TurnCache())
        keys, kept = [], set()
        for j in jobs:  # a call without a conversation, or a second call of one in this batch: KV not kept
            keep = j.key is not None and j.key not in kept
            keys.append(j.key if keep else object())
            if keep:
                kept.add(j.key)
        def cancelled(row: int) -> bool:  # the request's future is cancelled when its client goes (a stream closed)
            return jobs[row].future.done()

        try:
            with self._active(v) as model:
                gens = generate(model, self.tokenizer, [j.prompt for j in jobs], [j.sampling for j in jobs],
                                on_token=on_token, generator=generator, cache=cache, keys=keys, cancelled=cancelled,
                                between_steps=lambda: self._swaps and self._run_swaps(v))
        except (RuntimeError, ValueError, IndexError, TypeError, TrainerInputError) as exc:
            # torch's and the model's errors: the batch's requests fail (500), the engine thread serves on
            failed = GenerationFailed(f"generation failed: {type(exc).__name__}: {str(exc)[:300]}")
            for j in jobs:
                _settle(j, exc=failed)
            return
        finally:
            for k in keys:
                if k not in kept:
                    cache.forget(k)
        for k, g in zip(keys, gens):
            if g.finish_reason == "cancelled":  # a partial turn nobody will continue
                self.cancelled_rows += 1
                kept.discard(k)
                cache.forget(k)
        self._bound(cache, kept)
        self.batches += 1
        self.batched_requests += len(jobs)
        for j, g in zip(jobs, gens):
            _settle(j, result=g)

    def _bound(self, cache: TurnCache, used: set) -> None:
        """The conversations just used move to the end; the oldest go while the cache holds more than
        --kv-cache-tokens tokens."""
        for k in used:
            if k in cache.rows:
                cache.rows[k] = cache.rows.pop(k)
        total = sum(len(r.ids) for r in cache.rows.values())
        while total > self.cfg.kv_cache_tokens and cache.rows:
            total -= len(cache.rows.pop(next(iter(cache.rows))).ids)


_NOTHING = object()  # no command came in while a batch gathered
_SWAP = object()  # on the queue: a new version waits in _swaps (wakes the engine thread; a busy one looks each step)


def _settle(job: _Job, result: Generation | None = None, exc: BaseException | None = None) -> None:
    """Hand a result to the request's event loop (a cancelled request is skipped there)."""

    def put():
        if job.future.done():
            return
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    job.loop.call_soon_threadsafe(put)
