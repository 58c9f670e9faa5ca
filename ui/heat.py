"""A trajectory row's per-token log-probs as the conversation page's heat strip: one cell per token, coloured by the
probability the policy gave it when it sampled it (exp of `inference_logprobs`), its position, token id, mask and
value in the cell's title; the accessible summary (how many tokens, how many sampled, mean and min probability, mean
log-prob) and the least likely tokens as a table, so the page reads without a mouse.

The columns as the lake stores them (lake/schemas.py; Atropos' conventions, the ones trainers/modeling/token_columns.py
writes): `tokens` the ids, `masks` the id where the policy produced the token and -100 (MASKED) elsewhere, and
`inference_logprobs` the sampling log-prob where it produced it and 1.0 (NOT_SAMPLED, impossible for a log-prob)
elsewhere. A value above 0, NaN or missing is no log-prob: that cell is grey ("not sampled"), whatever its mask says.
Token ids are shown as ids: decoding them needs the model's tokenizer, which the UI does not load (the lake holds no
per-token text).

Bounded: at most MAX_CELLS cells (when a row holds more, the window starts at its first sampled token, so a long
prompt does not fill the strip with grey) and the summary over every token; colours are classes (h0 ... h9 by
probability decile; the page's Content-Security-Policy allows no style attribute), defined in static/ui.css for light
and dark.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

MAX_CELLS = 2000
LEVELS = 10
LEAST_LIKELY = 20  # rows of the least-likely table
MASKED = -100  # Atropos' label for a token not trained on (trainers/modeling/token_columns.py: not imported here)


@dataclass(frozen=True)
class Cell:
    position: int  # from 0, in the row's tokens
    token: int | None
    mask: int | None
    logprob: float | None  # None: not sampled (no log-prob recorded for it)

    @property
    def prob(self) -> float | None:
        return None if self.logprob is None else math.exp(self.logprob)

    @property
    def level(self) -> str:
        """The cell's class: h0 (p < 0.1) ... h9 (p >= 0.9), or `ns` (not sampled)."""
        p = self.prob
        return "ns" if p is None else f"h{min(LEVELS - 1, int(p * LEVELS))}"

    @property
    def title(self) -> str:
        token = "?" if self.token is None else str(self.token)
        trained = ("" if self.mask is None else " · prompt (masked)" if self.mask == MASKED else " · trained on")
        if self.logprob is None:
            return f"#{self.position} · token {token}{trained} · not sampled"
        return f"#{self.position} · token {token}{trained} · p {self.prob:.4f} · log-prob {self.logprob:.4f}"


@dataclass(frozen=True)
class Heat:
    cells: list[Cell]  # the window shown
    total: int  # tokens in the row (the longest of the three columns)
    sampled: int  # tokens with a log-prob
    mean_prob: float | None
    min_prob: float | None
    mean_logprob: float | None
    least: list[Cell]  # the LEAST_LIKELY sampled tokens of the whole row, least likely first
    lengths: dict[str, int]  # each column's length (they should agree; the page says so when they do not)

    @property
    def cut(self) -> bool:
        return len(self.cells) < self.total

    @property
    def first(self) -> int:
        return self.cells[0].position if self.cells else 0

    @property
    def aligned(self) -> bool:
        return len({n for n in self.lengths.values() if n}) <= 1

    @property
    def summary(self) -> str:
        """The strip in words (its accessible name, and the line above it)."""
        if not self.sampled:
            return f"{self.total:,} tokens, none with a sampling log-prob"
        return (f"{self.total:,} tokens, {self.sampled:,} sampled: mean p {self.mean_prob:.3f}, "
                f"min p {self.min_prob:.4f}, mean log-prob {self.mean_logprob:.3f}")


def logprob(value: Any) -> float | None:
    """A recorded log-prob, or None where there is none: missing, not a number, NaN, or above 0 (1.0 is Atropos'
    NOT_SAMPLED)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if v <= 0.0 else None  # NaN compares False: None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _at(values: Sequence | None, i: int) -> Any:
    return values[i] if values is not None and i < len(values) else None


def token_heat(row: dict[str, Any], max_cells: int = MAX_CELLS) -> Heat | None:
    """The heat of `row` (None when it records no log-probs)."""
    lps = row.get("inference_logprobs") or None
    if not lps:
        return None
    tokens, masks = row.get("tokens") or None, row.get("masks") or None
    lengths = {"tokens": len(tokens or ()), "masks": len(masks or ()), "inference_logprobs": len(lps)}
    total = max(lengths.values())
    values = [logprob(v) for v in lps]
    sampled = [(v, i) for i, v in enumerate(values) if v is not None]
    first = sampled[0][1] if sampled else 0
    start = max(0, min(first, total - max_cells)) if total > max_cells else 0

    def cell(i: int) -> Cell:
        return Cell(i, _int(_at(tokens, i)), _int(_at(masks, i)), values[i] if i < len(values) else None)

    cells = [cell(i) for i in range(start, min(total, start + max_cells))]
    if sampled:
        probs = [math.exp(v) for v, _ in sampled]
        mean_prob, min_prob = sum(probs) / len(probs), min(probs)
        mean_lp = sum(v for v, _ in sampled) / len(sampled)
        least = [cell(i) for _, i in sorted(sampled)[:LEAST_LIKELY]]
    else:
        mean_prob = min_prob = mean_lp = None
        least = []
    return Heat(cells, total, len(sampled), mean_prob, min_prob, mean_lp, least, lengths)
