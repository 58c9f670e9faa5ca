"""Atropos' token conventions, the one place they are written: a sampled sequence's `tokens`, `masks` and
`inference_logprobs` columns as the lake stores them, Atropos' trainers read them, and our forward pass and GRPO
update consume them.

- masks: the token id where the policy produced the token (what the loss trains on), MASKED (-100, the label a
  causal-LM cross-entropy ignores) elsewhere: a mask row is the labels row.
- inference_logprobs: the sampling log-prob where the policy produced the token, NOT_SAMPLED (1.0, impossible for
  a log-prob) elsewhere.

Why in trainers/modeling and not beside the message model (envs/): the forward pass and the GRPO update use these
numbers and import nothing of envs, lake, views or ingest (the model-code-without-lake contract); the model
server (serving/record.py) imports them from here, and nothing below the trainers writes token columns.
"""
from __future__ import annotations

MASKED = -100
NOT_SAMPLED = 1.0


def token_columns(ids: list[int], sampled: list, logprobs: list[float] | None = None) -> dict:
    """{tokens, masks, inference_logprobs} of a sequence: `sampled[i]` true where the policy produced token i;
    `logprobs` aligned with `ids` (read only where sampled), None for none recorded."""
    if len(sampled) != len(ids) or (logprobs is not None and len(logprobs) != len(ids)):
        raise ValueError(f"{len(ids)} tokens, {len(sampled)} sampled flags and "
                         f"{'no' if logprobs is None else len(logprobs)} log-probs: they must align")
    lps = logprobs if logprobs is not None else [NOT_SAMPLED] * len(ids)
    return {"tokens": list(ids), "masks": [t if s else MASKED for t, s in zip(ids, sampled)],
            "inference_logprobs": [float(lp) if s else NOT_SAMPLED for lp, s in zip(lps, sampled)]}


def prompt_completion_columns(prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]) -> dict:
    """The token columns of one sampled completion after a prompt (a served call): the completion trained on."""
    n, m = len(prompt_ids), len(completion_ids)
    return token_columns(list(prompt_ids) + list(completion_ids), [False] * n + [True] * m,
                         [NOT_SAMPLED] * n + list(logprobs))
