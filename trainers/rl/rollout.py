"""A rollout: an evaluation episode (trainers/generation/episodes.py) that also remembers which of its tokens the
model sampled and their log-probs, so the GRPO update (trainers/rl/grpo.py) trains on exactly those. Apart from
grpo.py because an episode holds an environment: the update itself imports none.
"""
from __future__ import annotations

from trainers.generation.episodes import Episode
from trainers.generation.generate import Generation
from trainers.modeling.token_columns import NOT_SAMPLED


class Rollout(Episode):
    """An episode that keeps the spans of tokens the model generated (what the loss trains on)."""

    def __init__(self, env, task_id: str, seed: int, tok, group: int):
        self.group = group
        self.advantage = 0.0
        super().__init__(env, task_id, seed, tok)

    def _start(self) -> None:
        """A (re)start from reset: the generated spans of a play the environment faulted are dropped with it."""
        super()._start()
        self.spans: list[tuple[int, int]] = []
        self.tail: list[int] = []  # the final turn: the environment ended the episode, so ids does not hold it
        self.logps: list[float] = []  # the sampled tokens' log-probs at generation, in order

    def advance(self, tok, gen: Generation, max_context: int) -> None:
        start = len(self.ids)
        super().advance(tok, gen, max_context)
        self.spans.append((start, start + len(gen.token_ids)))
        self.logps += gen.logprobs
        if len(self.ids) == start:  # the episode ended on this turn: its tokens are not in ids
            self.tail = list(gen.token_ids)

    def sequence(self) -> tuple[list[int], list[int]]:
        """(token ids, 1 where the model sampled the token)."""
        ids = self.ids + self.tail
        mask = [0] * len(ids)
        for a, b in self.spans:
            mask[a:b] = [1] * (b - a)
        return ids, mask

    def inference_logprobs(self) -> list[float]:
        """The generation's log-prob of each token of `sequence()`, NOT_SAMPLED where the policy did not sample."""
        ids, mask = self.sequence()
        out = [NOT_SAMPLED] * len(ids)
        at = iter(self.logps)
        for i, m in enumerate(mask):
            if m:
                lp = next(at)
                out[i] = lp if lp == lp else NOT_SAMPLED  # NaN: a scripted reply, no log-prob recorded
        return out

    @property
    def generated_tokens(self) -> int:
        return sum(b - a for a, b in self.spans)
