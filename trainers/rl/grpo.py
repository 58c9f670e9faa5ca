"""The GRPO pieces of online RL: multi-turn rollouts as token sequences, group-normalised advantages, the
policy-gradient loss on the assistant's tokens (with an optional KL penalty to a reference policy).

A rollout is an evaluation episode (trainers/generation/episodes.py's `Episode`: the chat template's own rendering, turn
after turn, recorded by transcript/recorder.py) that also remembers which of its tokens the model sampled: the loss
covers exactly those (every assistant turn, its closing end-of-turn token included), never the prompt, tool
results or the template's scaffolding. One advantage per episode, shared by all its tokens (GRPO's outcome
supervision): A = (R - mean of its group) / (std of its group), R the episode's return (the sum of the
environment's per-step rewards). A group whose returns are all equal carries no signal and no gradient.

Conventions as trl's GRPOTrainer (scale_rewards "group", one update per generation batch, so the PPO ratio is 1
and clipping is inactive): the loss is the sum over sampled tokens of -w * A * log p, normalised as trl's
`loss_type`: "dapo" divides by the number of sampled tokens in the batch (every token weighs the same), "grpo"
takes each episode's token mean, then the mean over the batch's episodes (every episode weighs the same); with
kl_beta > 0 the k3 estimator exp(ref - logp) - (ref - logp) - 1 is added per token, weighted by kl_beta.
Why both: where a failure is longer than a success (more turns, a loop cut at the token limit), "dapo" gives a
group's negative advantages more tokens than its positive ones, so on balance the update lowers the likelihood of
what the episodes share; "grpo" keeps each group's advantages summing to zero in the loss as well. "dapo" stays the
default: bench/online_arms.py compares the two (trainers/README.md has the figures).

w corrects for the rollouts coming from another engine than the trainer's forward (a merged bf16 copy, whose
log-probs differ a little: docs/training-notes.md): truncated importance sampling as trl's `vllm_importance_sampling_correction` and
verl's TIS, w = min(exp(logp_train - logp_rollout), C) per token, detached, C = `tis_cap` (2 by default; 0 turns it
off), with logp_rollout the log-prob generation recorded for the token (1 where none was recorded). The mean
|logp_train - logp_rollout| is reported as the step's `logprob_drift`.

The rows of a micro-batch share the environment's system prompt and tools (most of a first prompt): that prefix
runs once and its KV cache is expanded to the batch, as SFT does (trainers/modeling/forward.py's
shared_prefix_inputs; the same loss, gradients within 1e-5 relative, tested; bench/bench_generation.py measures
what it saves).

The Rollout class, an environment's episode, is in trainers/rl/rollout.py: this module imports no environment and
no lake, so the update runs where neither is installed (bench/gpu_check.py, the model-code-without-lake contract).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trainers.modeling.token_columns import NOT_SAMPLED

ADV_EPS = 1e-4  # trl's epsilon in the std normalisation
TIS_CAP = 2.0  # trl's vllm_importance_sampling_cap default
LOSS_TYPES = ("dapo", "grpo")
MIN_SHARED = 16  # shared-prefix tokens below which the prefix pass costs more than it saves (as SFT)


@dataclass
class SampledSequence:
    """A rollout as a learner reads it back from the lake (`tokens`, and `masks` marking what the policy sampled):
    trained exactly as the Rollout an actor played."""

    ids: list[int]
    mask: list[int]  # 1 where the policy sampled the token
    advantage: float = 0.0
    tail: tuple = ()  # a Rollout's final turn is already in the lake's tokens
    logprobs: list[float] | None = None  # the lake's inference_logprobs (aligned with ids), when recorded

    def sequence(self) -> tuple[list[int], list[int]]:
        return list(self.ids), list(self.mask)

    def inference_logprobs(self) -> list[float]:
        return list(self.logprobs) if self.logprobs is not None else [NOT_SAMPLED] * len(self.ids)

    @property
    def generated_tokens(self) -> int:
        return sum(self.mask)


def group_advantages(returns: list[float], groups: list[int]) -> list[float]:
    """(R - group mean) / (group std + eps); 0 for every member of a group with equal returns."""
    by: dict[int, list[float]] = {}
    for r, g in zip(returns, groups):
        by.setdefault(g, []).append(r)
    stats = {}
    for g, rs in by.items():
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
        stats[g] = (mean, std)
    return [0.0 if stats[g][1] < 1e-8 else (r - stats[g][0]) / (stats[g][1] + ADV_EPS) for r, g in zip(returns, groups)]


@dataclass
class LossStats:
    loss: float
    pg_loss: float
    kl: float
    sequences: int  # sequences forwarded
    tokens: int  # tokens forwarded (prompt + generated): the training throughput's numerator
    sampled_tokens: int  # generated tokens in the batch: the loss's denominator
    logprob_drift: float = 0.0  # mean |logp_train - logp_rollout| over the trained tokens with a recorded log-prob
    tis_weight: float = 1.0  # mean truncated importance weight over those tokens
    shared_tokens: int = 0  # prefix tokens computed once instead of once per sequence


@dataclass
class _Batch:
    """A micro-batch: suffix ids after the shared prefix (the whole sequences when none), right padded; the
    attention mask over prefix + suffix; per position t of the suffix, whether token t+1 was sampled and its
    rollout log-prob (NaN where none was recorded)."""

    ids: object
    att: object
    mask: object
    old: object
    prefix: object | None

    def inputs(self, model) -> dict:
        from trainers.modeling.forward import shared_prefix_inputs

        if self.prefix is None:
            return dict(input_ids=self.ids, attention_mask=self.att)
        return shared_prefix_inputs(model, self.prefix, self.ids, self.att)

    @property
    def shared(self) -> int:
        return 0 if self.prefix is None else self.prefix.shape[1] * (self.ids.shape[0] - 1)


def _token_logps(model, batch: _Batch):
    """log p(token t+1 | tokens <= t) where batch.mask (B x S-1) is set, 0 elsewhere. For a plain linear head
    (trainers.modeling.forward.logits_at) the head runs on the sampled positions only, as SFT's label-only loss does: the
    policy loss needs no logits at prompt and tool-result positions, which are most of a multi-turn rollout, and a
    full-vocabulary logit tensor is what dominates an update's memory with SmolLM2's 49,152 words (same values and
    gradients, tested)."""
    import torch

    from trainers.modeling.forward import logits_at

    keep = batch.mask > 0
    logits = logits_at(model, keep, **batch.inputs(model)).float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, batch.ids[:, 1:][keep].unsqueeze(-1)).squeeze(-1)
    return torch.zeros(batch.mask.shape, dtype=picked.dtype, device=batch.mask.device).masked_scatter(keep, picked)


def _collate(chunk, pad_id: int, dev, share_prefix: bool) -> _Batch:
    import torch

    from trainers.modeling.batches import shared_prefix_len

    seqs = [r.sequence() for r in chunk]
    L = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.float32)
    old = torch.full((len(seqs), L), math.nan, dtype=torch.float32)
    for r, ((x, m), roll) in enumerate(zip(seqs, chunk)):
        ids[r, : len(x)] = torch.tensor(x)
        att[r, : len(x)] = 1
        mask[r, : len(m)] = torch.tensor(m, dtype=torch.float32)
        lp = torch.tensor(roll.inference_logprobs(), dtype=torch.float32)
        old[r, : len(x)] = torch.where(mask[r, : len(x)] > 0, lp, torch.full_like(lp, math.nan))
    old[old == NOT_SAMPLED] = math.nan  # a sampled token without a recorded log-prob (a scripted reply)
    P = 0
    if share_prefix and len(seqs) > 1:
        # the prefix ends before the first sampled token, so no predicted token is lost at the cut
        firsts = [m.index(1) if 1 in m else len(m) for _, m in seqs]
        P = shared_prefix_len(seqs, list(range(len(seqs))), firsts)
        P = P if P >= MIN_SHARED else 0
    prefix = ids[:1, :P].to(dev) if P else None
    return _Batch(ids[:, P:].to(dev), att.to(dev), mask[:, P + 1:].to(dev), old[:, P + 1:].to(dev), prefix)


def token_norm(rollout, episodes: int, sampled: int, loss_type: str) -> float:
    """An episode's per-token weight in the loss of a batch of `episodes` episodes and `sampled` sampled tokens:
    1 / sampled for "dapo", 1 / (episodes x the episode's sampled tokens) for "grpo"."""
    if loss_type == "dapo":
        return 1.0 / max(1, sampled)
    if loss_type == "grpo":
        return 1.0 / (episodes * max(1, rollout.generated_tokens))
    raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")


def backward_policy_loss(model, rollouts: list, pad_id: int, micro_batch: int, kl_beta: float = 0.0,
                         ref_model=None, *, share_prefix: bool = True, tis_cap: float = TIS_CAP,
                         loss_type: str = "dapo") -> LossStats:
    """Accumulate the gradient of the batch's GRPO loss (the caller steps the optimizer). `rollouts`: Rollouts
    (trainers/rl/rollout.py) or SampledSequences, anything with their `sequence()`, `inference_logprobs()`,
    `generated_tokens`, `advantage`, `ids` and `tail`. Episodes with a zero
    advantage are skipped when there is no KL term: their gradient is zero. share_prefix: the micro-batch's shared
    prompt prefix runs once (exact); tis_cap: the truncated importance-sampling cap (0: no correction); loss_type:
    how tokens are weighted (LOSS_TYPES, the module's docstring). The reported losses are per sampled token."""
    import torch

    dev = next(model.parameters()).device
    total_sampled = sum(r.generated_tokens for r in rollouts)
    use = [r for r in rollouts if r.advantage != 0.0 or kl_beta > 0]
    use.sort(key=lambda r: len(r.ids) + len(r.tail))  # similar lengths together: less padding
    loss_sum = pg_sum = kl_sum = drift_sum = weight_sum = 0.0
    tokens = shared = with_old = 0
    for b in range(0, len(use), micro_batch):
        chunk = use[b : b + micro_batch]
        batch = _collate(chunk, pad_id, dev, share_prefix)
        mask = batch.mask
        adv = torch.tensor([r.advantage for r in chunk], dtype=torch.float32, device=dev).unsqueeze(1)
        norm = torch.tensor([token_norm(r, len(rollouts), total_sampled, loss_type) for r in chunk],
                            dtype=torch.float32, device=dev).unsqueeze(1)
        logp = _token_logps(model, batch)
        has_old = (mask > 0) & ~torch.isnan(batch.old)
        delta = torch.where(has_old, logp.detach() - batch.old.nan_to_num(0.0), torch.zeros_like(logp))
        weight = torch.ones_like(logp)
        if tis_cap > 0:
            weight = torch.where(has_old, torch.exp(delta).clamp(max=tis_cap), weight)
        per_token = -(adv * weight * logp * mask)
        pg = per_token.sum()
        kl = torch.zeros((), device=dev)
        if kl_beta > 0 and ref_model is not None:
            with torch.no_grad():
                ref = _token_logps(ref_model, batch)
            d = ref - logp
            kl_token = (torch.exp(d) - d - 1) * mask
            kl = kl_token.sum()
            per_token = per_token + kl_beta * kl_token
        loss = pg + kl_beta * kl
        (per_token * norm).sum().backward()
        loss_sum += float(loss.detach())
        pg_sum += float(pg.detach())
        kl_sum += float(kl.detach())
        drift_sum += float(delta.abs().sum())
        weight_sum += float((weight * has_old).sum())
        with_old += int(has_old.sum())
        tokens += int(batch.att.sum())
        shared += batch.shared
    n = max(1, total_sampled)
    return LossStats(loss=loss_sum / n, pg_loss=pg_sum / n, kl=kl_sum / n, sequences=len(use), tokens=tokens,
                     sampled_tokens=total_sampled, logprob_drift=drift_sum / max(1, with_old),
                     tis_weight=weight_sum / with_old if with_old else 1.0, shared_tokens=shared)


def policy_update(model, params, opt, rollouts, pad_id: int, micro_batch: int, kl_beta: float = 0.0, ref_model=None,
                  *, bf16: bool = False, share_prefix: bool = True, tis_cap: float = TIS_CAP,
                  loss_type: str = "dapo") -> tuple[LossStats, float]:
    """One optimizer step on the batch's GRPO loss (none when no group had a signal): (stats, gradient norm before
    clipping to 1). bf16: the forward and backward under bfloat16 autocast (SmolLM2 LoRA on an avx512_bf16 CPU:
    14.8 -> 11.3 CPU-s for 8 rollouts, autocast re-casting the float32 weights in every product); the weights and
    the optimizer stay float32."""
    import torch

    model.train()
    opt.zero_grad(set_to_none=True)
    dev = next(model.parameters()).device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
        stats = backward_policy_loss(model, rollouts, pad_id, micro_batch, kl_beta, ref_model,
                                     share_prefix=share_prefix, tis_cap=tis_cap, loss_type=loss_type)
    grad_norm = 0.0
    if stats.sequences:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
        opt.step()
    model.eval()
    return stats, grad_norm
