"""The one generation path: batched continuation of token prompts, used by hermes_eval, the online-RL rollouts
(in-process and actors) and the model server.

`generate(model, tok, prompts, sampling)` decodes every row of a left-padded batch with the KV cache, one token per
step, greedy or sampled (temperature, top-p) per row, and returns for each row the generated ids, the log-prob of
each one under the model's raw float32 logits (the number the trainer computes for that token), optional top-k
alternatives and why it stopped. Greedy output is token for token what `transformers`' `model.generate` gives
(`reference_generate`, the plain path it replaced, kept for the tests and bench/bench_generation.py): the same
prompt pass, positions and cache, one forward per new token.

Two exact savings, on by default (issue 24; bash_exec_env prompts are ~272 SmolLM2 tokens of which 251 are the
environment's system prompt and tools):
- the prefix every prompt of the batch shares (system prompt + tools) is computed once, at batch 1, and its KV
  expanded to the batch (`share_prefix`); below MIN_SHARED tokens it is not worth a separate pass;
- with a `TurnCache`, each row's KV is kept after the call, so the next turn of a multi-turn episode (its prompt =
  the old prompt + the reply + the tool's answer) only computes the new tokens instead of re-reading the whole
  conversation (`cache`, `keys`).
Both are exact: tests/test_generation.py checks the episodes are identical, and bench/bench_generation.py measures
what they save (bench/REPORT.md). The rows' cached parts and new tokens are laid out as [shared prefix][pad | cached][pad | new]
with the padding masked out and explicit positions, so a batch mixes rows of any cached and new lengths.

bf16 (`rollout_model`): a merged (LoRA folded in), bfloat16 copy of the policy to generate with, on CPUs with
avx512_bf16 / AMX and bf16-capable GPUs (`bf16_supported`): faster prompt passes and decoding (docs/training-notes.md, "Figures behind the code";
bench/REPORT.md). It is not exact: greedy episodes can differ from float32's, and a sampled token's log-prob
differs from the trainer's, which the GRPO update corrects (truncated importance sampling, trainers/rl/grpo.py).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from trainers.runtime.errors import TrainerInputError

END_OF_TURN = "<|im_end|>"
MIN_SHARED = 16  # shared-prefix tokens below which a separate prefix pass costs more than it saves


@dataclass(frozen=True)
class Sampling:
    """How one row is decoded."""

    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_logprobs: int = 0  # k > 0: also return the k most likely tokens at each generated position
    stop_token_ids: tuple[int, ...] = ()  # stop tokens besides the tokenizer's end-of-turn token (<|im_end|>)
    stop_repetition: int = 0  # n > 0: stop a row whose last n tokens are one short span said over and over (looping)

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise TrainerInputError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise TrainerInputError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise TrainerInputError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_logprobs < 0:
            raise TrainerInputError(f"top_logprobs must be >= 0, got {self.top_logprobs}")
        check_stop_repetition(self.stop_repetition)


@dataclass
class Generation:
    """One row's continuation."""

    token_ids: list[int]  # generated ids, including the stop token when it stopped on one
    logprobs: list[float]  # log-softmax of the raw (temperature-1, float32) logits at each generated token
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)  # per position k (id, logprob); [] if k=0
    finish_reason: str = "stop"  # "stop" (a stop token) | "length" (max_new_tokens) | "repetition" (looping)
    # | "cancelled" (generate's `cancelled` said so: nobody waits for the rest)

    @classmethod
    def scripted(cls, token_ids: list[int]) -> "Generation":
        """Tokens a script chose (tests, expert replays): no model log-prob, so NaN."""
        return cls(list(token_ids), [math.nan] * len(token_ids), [], "stop")


LOOP_MAX_PERIOD = 16  # the longest span a loop repeats that `looping` looks for
MIN_LOOP_SPAN = 6  # the shortest tail `looping` judges: a token said 6 times, a pair 3 times
STOP_REPETITION = 48  # the repetition stop's span where it is on by default (hermes_eval, online RL)


def check_stop_repetition(n: int, name: str = "stop_repetition") -> int:
    """A stop_repetition setting (Sampling, hermes_eval, lachesis.toml): 0 (off) or a span `looping` can judge."""
    if n and n < MIN_LOOP_SPAN:
        raise TrainerInputError(f"{name} must be 0 (off) or at least {MIN_LOOP_SPAN} tokens, got {n}")
    return n


def looping(ids: list[int], span: int) -> bool:
    """The last `span` tokens are one piece of at most LOOP_MAX_PERIOD tokens repeated at least three times: what a
    small model emits once it is stuck (SmolLM2 after SFT on public bash tasks: 14 of 92 episodes ran to the token
    limit that way, issue 24). Three repeats and a span of dozens of tokens leave real commands alone."""
    if len(ids) < span:
        return False
    tail = ids[-span:]
    for p in range(1, min(LOOP_MAX_PERIOD, span // 3) + 1):
        if tail[-1 - p] == tail[-1] and all(tail[i] == tail[i - p] for i in range(p, span)):
            return True
    return False


# ----------------------------------------------------------------------------------------------- KV kept across turns
@dataclass
class _Prefix:
    """The KV of a token prefix computed once at batch 1: per layer (keys, values) of shape (1, heads, P, dim)."""

    ids: tuple[int, ...]
    kv: list[tuple]


@dataclass
class _Row:
    """What a TurnCache holds for one conversation: KV for `ids` = the shared prefix's tokens + its own part."""

    ids: list[int]
    prefix: _Prefix | None
    kv: list[tuple] | None  # per layer (keys, values) of shape (heads, T, dim) for ids[len(prefix):]

    @property
    def own(self) -> int:
        return len(self.ids) - (len(self.prefix.ids) if self.prefix else 0)


class TurnCache:
    """The KV of conversations generated turn after turn (hermes_eval's and the rollouts' episodes), by key. Pass it
    with one key per row to `generate`; `forget` a key once its conversation has ended (its KV is freed)."""

    def __init__(self):
        self.rows: dict = {}

    def forget(self, key) -> None:
        self.rows.pop(key, None)

    def __len__(self) -> int:
        return len(self.rows)


def _common(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _reusable(row: _Row | None, prompt: list[int]) -> _Row | None:
    """The part of a cached row that is a prefix of `prompt` (at least one prompt token is left to feed: its logits
    start the reply), or None."""
    if row is None:
        return None
    n = min(_common(row.ids, prompt), len(prompt) - 1)
    p = len(row.prefix.ids) if row.prefix else 0
    if n < p or n == 0:
        return None
    if n == len(row.ids):
        return row
    kv = [(k[:, : n - p], v[:, : n - p]) for k, v in row.kv] if row.kv is not None else None
    return _Row(row.ids[:n], row.prefix, kv)


def _shared_len(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token to feed."""
    first = prompts[0]
    n = min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        n = _common(first[:n], p)
    return max(n, 0)


def _prefix_kv(model, ids: list[int], dev) -> _Prefix:
    import torch
    from transformers import DynamicCache

    from trainers.modeling.forward import decoder

    cache = DynamicCache()
    decoder(model)(input_ids=torch.tensor([ids], device=dev), cache=cache, use_cache=True)
    return _Prefix(tuple(ids), [(layer.keys, layer.values) for layer in cache.layers])


def _plan(model, prompts, rows, share_prefix: bool, dev):
    """(prefix or None, rows whose own part follows that prefix). Rows are fresh (turn 1) or cached (a later turn);
    a batch mixing rows of different prefixes folds each row's prefix into its own part."""
    import torch

    prefixes = {id(r.prefix): r.prefix for r in rows if r is not None and r.prefix is not None}
    if rows and all(r is not None and r.prefix is not None for r in rows):
        if len({p.ids for p in prefixes.values()}) == 1:
            prefix = next(iter(prefixes.values()))
            return prefix, [_Row(r.ids, prefix, r.kv) for r in rows]
    if not prefixes and all(r is None for r in rows):
        P = _shared_len(prompts) if share_prefix and len(prompts) > 1 else 0
        if P >= MIN_SHARED:
            prefix = _prefix_kv(model, prompts[0][:P], dev)
            return prefix, [_Row(list(prefix.ids), prefix, None) for _ in prompts]
        return None, [_Row([], None, None) for _ in prompts]
    out = []
    for r in rows:
        if r is None:
            out.append(_Row([], None, None))
        elif r.prefix is None:
            out.append(r)
        else:  # fold the prefix into the row's own part
            own = r.kv or [(None, None)] * len(r.prefix.kv)
            kv = [(torch.cat([pk[0]] + ([k] if k is not None else []), 1), torch.cat([pv[0]] + ([v] if v is not None else []), 1))
                  for (pk, pv), (k, v) in zip(r.prefix.kv, own)]
            out.append(_Row(r.ids, None, kv))
    return None, out


def _batch_cache(prefix: _Prefix | None, rows: list[_Row], B: int):
    """The DynamicCache of the batch's past: [prefix][left pad | each row's cached own part], and its mask."""
    import torch
    from transformers import DynamicCache

    C = max(r.own for r in rows)
    P = len(prefix.ids) if prefix else 0
    att = torch.zeros((B, P + C), dtype=torch.long)
    att[:, :P] = 1
    for i, r in enumerate(rows):
        att[i, P + C - r.own :] = 1
    if P + C == 0:
        return DynamicCache(), att
    layers = []
    n_layers = len(prefix.kv) if prefix else len(next(r.kv for r in rows if r.kv is not None))
    for li in range(n_layers):
        parts_k, parts_v = [], []
        ref = prefix.kv[li][0] if prefix else next(r.kv for r in rows if r.kv is not None)[li][0].unsqueeze(0)
        H, D = ref.shape[1], ref.shape[3]
        if prefix:
            parts_k.append(prefix.kv[li][0].expand(B, -1, -1, -1))
            parts_v.append(prefix.kv[li][1].expand(B, -1, -1, -1))
        if C:
            k = ref.new_zeros((B, H, C, D))
            v = ref.new_zeros((B, H, C, D))
            for i, r in enumerate(rows):
                if r.own:
                    k[i, :, C - r.own :] = r.kv[li][0]
                    v[i, :, C - r.own :] = r.kv[li][1]
            parts_k.append(k)
            parts_v.append(v)
        layers.append((torch.cat(parts_k, 2) if len(parts_k) > 1 else parts_k[0].contiguous(),
                       torch.cat(parts_v, 2) if len(parts_v) > 1 else parts_v[0].contiguous()))
    return DynamicCache(ddp_cache_data=layers), att


# ----------------------------------------------------------------------------------------------- the decode loop
def _next_logits(model, **inputs):
    """float32 logits at each row's last position. With a plain linear head the head runs on those positions as one
    2-D matrix product: transformers' `logits_to_keep=1` hands the head a strided 3-D view, which bf16 on a CPU turns
    into a batched product over a copy of the head's weights per row (a fifth of a SmolLM2 prompt pass:
    docs/training-notes.md, "Figures behind the code")."""
    import torch

    from trainers.modeling.forward import PLAIN_HEAD_TYPES, decoder

    if model.config.model_type not in PLAIN_HEAD_TYPES:
        return model(**inputs, logits_to_keep=1).logits[:, -1, :].to(dtype=torch.float32)
    hidden = decoder(model)(**inputs).last_hidden_state[:, -1, :].contiguous()
    return model.get_output_embeddings()(hidden).to(dtype=torch.float32)


def _pick(logits, samplings: list[Sampling], done, generator):
    """Next token per row: argmax for greedy rows, a draw from softmax(logits / T) within the top-p nucleus else."""
    import torch

    nxt = logits.argmax(-1)
    for i, s in enumerate(samplings):
        if s.temperature <= 0 or done[i]:
            continue
        probs = torch.softmax(logits[i] / s.temperature, -1)
        if s.top_p < 1.0:
            p_sorted, order = probs.sort(descending=True)
            drop = p_sorted.cumsum(-1) - p_sorted > s.top_p  # keep the smallest set whose mass reaches top_p
            probs = probs.scatter(0, order, p_sorted.masked_fill(drop, 0.0))
        nxt[i] = torch.multinomial(probs, 1, generator=generator)[0]
    return nxt


def generate(model, tok, prompts: list[list[int]], sampling: Sampling | list[Sampling], *, on_token=None,
             generator=None, share_prefix: bool = True, cache: TurnCache | None = None,
             keys: list | None = None, cancelled=None, between_steps=None) -> list[Generation]:
    """Batched generation of each prompt's continuation. One Sampling for all rows or one per row.

    on_token(row, token_id, logprob): called for each new token as soon as it is chosen. cancelled(row) -> bool:
    asked before each step for the rows still going; a row it names stops there (finish_reason "cancelled"), and
    the batch ends once every row has stopped. between_steps(): called after each step, before the next forward pass
    (the serving engine installs a new version there, leaving this batch's weights alone). generator: a seeded
    torch.Generator for sampling (default torch's global RNG). share_prefix: compute the prompts' common prefix once.
    cache + keys (one hashable per row): reuse and keep each row's KV across calls (multi-turn)."""
    import torch

    if not prompts:
        return []
    B = len(prompts)
    samplings = list(sampling) if isinstance(sampling, (list, tuple)) else [sampling] * B
    if len(samplings) != B:
        raise TrainerInputError(f"{len(samplings)} Sampling for {B} prompts: give one, or one per prompt")
    if any(not p for p in prompts):
        raise TrainerInputError("an empty prompt: every prompt needs at least one token")
    if cache is not None and (keys is None or len(keys) != B):
        raise TrainerInputError("a TurnCache needs one key per prompt")
    dev = next(model.parameters()).device
    pad = tok.pad_token_id
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    stops = [{eos, *s.stop_token_ids} for s in samplings]
    cached = [_reusable(cache.rows.get(k), p) for k, p in zip(keys, prompts)] if cache is not None else [None] * B
    with torch.no_grad():
        prefix, rows = _plan(model, prompts, cached, share_prefix, dev)
        past, past_att = _batch_cache(prefix, rows, B)
        new = [p[len(r.ids):] for p, r in zip(prompts, rows)]
        N = max(len(x) for x in new)
        ids = torch.full((B, N), pad, dtype=torch.long)
        att = torch.cat([past_att, torch.zeros((B, N), dtype=torch.long)], 1)
        for i, x in enumerate(new):
            ids[i, N - len(x):] = torch.tensor(x)
            att[i, att.shape[1] - len(x):] = 1
        # positions as transformers' generate derives them from the mask: padding takes no position
        pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)
        T0 = past_att.shape[1]
        cpos = torch.arange(T0, T0 + N)
        logits = _next_logits(model, input_ids=ids.to(dev), attention_mask=att.to(dev),
                              position_ids=pos[:, -N:].to(dev), cache_position=cpos.to(dev), cache=past, use_cache=True)
        gens = [Generation([], [], [], "length") for _ in range(B)]
        done = [False] * B
        t = 0
        while True:
            if cancelled is not None:
                for i in range(B):
                    if not done[i] and cancelled(i):
                        gens[i].finish_reason, done[i] = "cancelled", True
                if all(done):
                    break
            logp = torch.log_softmax(logits, -1)
            nxt = _pick(logits, samplings, done, generator)
            fed = []
            for i in range(B):
                if done[i]:
                    fed.append(pad)
                    continue
                tid = int(nxt[i])
                lp = float(logp[i, tid])
                g = gens[i]
                g.token_ids.append(tid)
                g.logprobs.append(lp)
                k = samplings[i].top_logprobs
                if k:
                    v, ix = logp[i].topk(k)
                    g.top_logprobs.append(list(zip(ix.tolist(), v.tolist())))
                if on_token is not None:
                    on_token(i, tid, lp)
                if tid in stops[i]:
                    g.finish_reason, done[i] = "stop", True
                elif len(g.token_ids) >= samplings[i].max_new_tokens:
                    done[i] = True
                elif samplings[i].stop_repetition and looping(g.token_ids, samplings[i].stop_repetition):
                    g.finish_reason, done[i] = "repetition", True
                fed.append(tid)
            t += 1
            if all(done):
                break
            if between_steps is not None:
                between_steps()
            att = torch.cat([att, torch.ones((B, 1), dtype=torch.long)], 1)
            p = (pos[:, -1:] + 1)
            pos = torch.cat([pos, p], 1)
            logits = _next_logits(model, input_ids=torch.tensor(fed, device=dev).unsqueeze(1),
                                  attention_mask=att.to(dev), position_ids=p.to(dev),
                                  cache_position=torch.tensor([T0 + N + t - 1], device=dev), cache=past, use_cache=True)
        if cache is not None:
            _keep(cache, keys, prompts, gens, prefix, rows, past, T0, N)
    return gens


def _keep(cache: TurnCache, keys, prompts, gens, prefix, rows, past, T0: int, N: int) -> None:
    """Store each row's KV (its cached part, its new prompt tokens, the generated tokens that were fed: all but the
    last) for its next turn."""
    import torch

    P = len(prefix.ids) if prefix else 0
    C = T0 - P
    for i, (key, prompt, g, r) in enumerate(zip(keys, prompts, gens, rows)):
        n_new = len(prompt) - len(r.ids)
        fed = len(g.token_ids) - 1
        idx = list(range(P + C - r.own, P + C)) + list(range(T0 + N - n_new, T0 + N)) + \
            list(range(T0 + N, T0 + N + fed))
        ix = torch.tensor(idx, device=past.layers[0].keys.device)
        kv = [(layer.keys[i].index_select(1, ix), layer.values[i].index_select(1, ix)) for layer in past.layers]
        cache.rows[key] = _Row(list(prompt) + g.token_ids[:-1], prefix, kv)


class Turns:
    """`generate` over episodes that come back turn after turn (evaluate.play's `generate(prompts, episodes)`): each
    episode's KV cache is kept for its next turn (reuse_kv) and `forget(episode)` frees it when it ends."""

    def __init__(self, model, tok, sampling: Sampling, *, reuse_kv: bool = True, generator=None):
        self.model, self.tok, self.sampling, self.generator = model, tok, sampling, generator
        self.reuse_kv = reuse_kv
        self.cache = TurnCache() if reuse_kv else None

    def __call__(self, prompts: list[list[int]], episodes: list) -> list[Generation]:
        return generate(self.model, self.tok, prompts, self.sampling, generator=self.generator,
                        share_prefix=self.reuse_kv, cache=self.cache, keys=episodes if self.reuse_kv else None)

    def forget(self, episode) -> None:
        if self.cache is not None:
            self.cache.forget(episode)


# ----------------------------------------------------------------------------------------------- reference and bf16
def reference_generate(model, tok, prompts: list[list[int]], max_new_tokens: int,
                       temperature: float = 0.0) -> list[list[int]]:
    """The plain transformers path (`model.generate` on one left-padded batch, what hermes_eval and the rollouts used
    before `generate`): the reference the tests and bench/bench_generation.py compare against."""
    import torch

    dev = next(model.parameters()).device
    L = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.full((len(prompts), L), pad, dtype=torch.long)
    att = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        att[i, L - len(p):] = 1
    eos = tok.convert_tokens_to_ids(END_OF_TURN)
    with torch.no_grad():
        kw = dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0) if temperature > 0 else \
            dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), max_new_tokens=max_new_tokens,
                             eos_token_id=eos, pad_token_id=pad, **kw)
    res = []
    for row in out[:, L:].tolist():
        new = []
        for t in row:
            new.append(t)
            if t == eos:
                break
        while new and new[-1] == pad and pad != eos:
            new.pop()
        res.append(new)
    return res


BF16 = ("auto", "on", "off")
BF16_HELP = ("bf16 generation and updates: auto (on where the CPU has avx512_bf16/AMX or the GPU supports bf16) | on | "
             "off. Rollouts and evaluations generate with a merged bfloat16 copy of the policy (SmolLM2 on an "
             "avx512_bf16 CPU: a 2x faster prompt pass, 1.5x faster decoding; greedy outputs may differ from "
             "float32's), the GRPO update runs under bf16 autocast, and the policy gradient is corrected for the "
             "rollout/trainer mismatch (truncated importance sampling)")


def check_bf16(value: str) -> str:
    v = str(value).strip().lower()
    if v not in BF16:
        raise TrainerInputError(f"unknown --bf16 {value!r}: use auto, on or off")
    return v


def use_bf16(setting: str, dev) -> bool:
    """Whether a --bf16 setting means bf16 on torch device `dev`."""
    return setting == "on" or (setting == "auto" and bf16_supported(dev))


def bf16_supported(dev) -> bool:
    """bfloat16 arithmetic in hardware: a CUDA device that has it, or a CPU with avx512_bf16 / AMX (elsewhere bf16
    on a CPU is emulated and slower than float32)."""
    import torch

    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return any(f in flags.split() for f in ("avx512_bf16", "amx_bf16"))


def rollout_model(model, bf16: bool):
    """The model to generate with: `model` itself, or (bf16) a bfloat16 copy with any LoRA adapter merged into its
    weights (no adapter matmuls per token). The copy is a snapshot: make a new one after each update."""
    import torch

    if not bf16:
        return model
    from peft import PeftModel

    m = copy.deepcopy(model)  # parameters only (no .grad): torch's Parameter.__deepcopy__
    if isinstance(m, PeftModel):
        m = m.merge_and_unload()
    m = m.to(torch.bfloat16).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m
