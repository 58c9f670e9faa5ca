"""The GRPO pieces of online RL: multi-turn rollouts as token sequences, group-normalised advantages, the
policy-gradient loss on the assistant's tokens (with an optional KL penalty to a reference policy).

A rollout is an evaluation episode (trainers/evaluate.py's `Episode`: the chat template's own rendering, turn
after turn, recorded by envs/episode.py) that also remembers which of its tokens the model sampled: the loss
covers exactly those (every assistant turn, its closing end-of-turn token included), never the prompt, tool
results or the template's scaffolding. One advantage per episode, shared by all its tokens (GRPO's outcome
supervision): A = (R - mean of its group) / (std of its group), R the episode's return (the sum of the
environment's per-step rewards). A group whose returns are all equal carries no signal and no gradient.

Conventions as trl's GRPOTrainer (loss_type "dapo", scale_rewards "group", one update per generation batch, so
the importance ratio is 1 and clipping is inactive): the loss is the sum over sampled tokens of -A * log p,
divided by the number of sampled tokens in the batch; with kl_beta > 0 the k3 estimator
exp(ref - logp) - (ref - logp) - 1 is added per token, weighted by kl_beta.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .evaluate import Episode

ADV_EPS = 1e-4  # trl's epsilon in the std normalisation


class Rollout(Episode):
    """An episode that keeps the spans of tokens the model generated (what the loss trains on)."""

    def __init__(self, env, task_id: str, seed: int, tok, group: int):
        super().__init__(env, task_id, seed, tok)
        self.group = group
        self.spans: list[tuple[int, int]] = []
        self.tail: list[int] = []  # the final turn: the environment ended the episode, so ids does not hold it
        self.advantage = 0.0

    def advance(self, tok, new_ids: list[int], max_context: int) -> None:
        start = len(self.ids)
        super().advance(tok, new_ids, max_context)
        self.spans.append((start, start + len(new_ids)))
        if len(self.ids) == start:  # the episode ended on this turn: its tokens are not in ids
            self.tail = list(new_ids)

    def sequence(self) -> tuple[list[int], list[int]]:
        """(token ids, 1 where the model sampled the token)."""
        ids = self.ids + self.tail
        mask = [0] * len(ids)
        for a, b in self.spans:
            mask[a:b] = [1] * (b - a)
        return ids, mask

    @property
    def generated_tokens(self) -> int:
        return sum(b - a for a, b in self.spans)


@dataclass
class SampledSequence:
    """A rollout as a learner reads it back from the lake (`tokens`, and `masks` marking what the policy sampled):
    trained exactly as the Rollout an actor played."""

    ids: list[int]
    mask: list[int]  # 1 where the policy sampled the token
    advantage: float = 0.0
    tail: tuple = ()  # a Rollout's final turn is already in the lake's tokens

    def sequence(self) -> tuple[list[int], list[int]]:
        return list(self.ids), list(self.mask)

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


def _token_logps(model, ids, att, mask):
    """log p(token t | tokens < t) for t = 1..L-1 where mask (B x L-1) is set, 0 elsewhere. For a plain linear head
    (trainers.sft.logits_at) the head runs on the sampled positions only, as SFT's label-only loss does: the
    policy loss needs no logits at prompt and tool-result positions, which are most of a multi-turn rollout, and a
    full-vocabulary logit tensor is what dominates an update's memory with SmolLM2's 49,152 words (same values and
    gradients, tested)."""
    import torch

    from .sft import logits_at

    keep = mask > 0
    logits = logits_at(model, keep, input_ids=ids, attention_mask=att).float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:][keep].unsqueeze(-1)).squeeze(-1)
    return torch.zeros(mask.shape, dtype=picked.dtype, device=mask.device).masked_scatter(keep, picked)


def _collate(seqs: list[tuple[list[int], list[int]]], pad_id: int, dev):
    import torch

    L = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.float32)
    for r, (x, m) in enumerate(seqs):
        ids[r, : len(x)] = torch.tensor(x)
        att[r, : len(x)] = 1
        mask[r, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids.to(dev), att.to(dev), mask[:, 1:].to(dev)


def backward_policy_loss(model, rollouts: list[Rollout], pad_id: int, micro_batch: int, kl_beta: float = 0.0,
                         ref_model=None) -> LossStats:
    """Accumulate the gradient of the batch's GRPO loss (the caller steps the optimizer). Episodes with a zero
    advantage are skipped when there is no KL term: their gradient is zero."""
    import torch

    dev = next(model.parameters()).device
    total_sampled = sum(r.generated_tokens for r in rollouts)
    use = [r for r in rollouts if r.advantage != 0.0 or kl_beta > 0]
    use.sort(key=lambda r: len(r.ids) + len(r.tail))  # similar lengths together: less padding
    loss_sum = pg_sum = kl_sum = 0.0
    tokens = 0
    for b in range(0, len(use), micro_batch):
        chunk = use[b : b + micro_batch]
        ids, att, mask = _collate([r.sequence() for r in chunk], pad_id, dev)
        adv = torch.tensor([r.advantage for r in chunk], dtype=torch.float32, device=dev).unsqueeze(1)
        logp = _token_logps(model, ids, att, mask)
        pg = -(adv * logp * mask).sum()
        loss = pg
        kl = torch.zeros((), device=dev)
        if kl_beta > 0 and ref_model is not None:
            with torch.no_grad():
                ref = _token_logps(ref_model, ids, att, mask)
            d = ref - logp
            kl = ((torch.exp(d) - d - 1) * mask).sum()
            loss = loss + kl_beta * kl
        (loss / max(1, total_sampled)).backward()
        loss_sum += float(loss.detach())
        pg_sum += float(pg.detach())
        kl_sum += float(kl.detach())
        tokens += int(att.sum())
    n = max(1, total_sampled)
    return LossStats(loss=loss_sum / n, pg_loss=pg_sum / n, kl=kl_sum / n, sequences=len(use), tokens=tokens,
                     sampled_tokens=total_sampled)
