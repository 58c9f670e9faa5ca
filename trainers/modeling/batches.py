"""Tokenised conversations as training batches: assistant-only labels from the chat template, length-bucketed
batch order, padding, and the prompt prefix a batch's rows share.
"""
from __future__ import annotations

import random

import torch

from trainers.modeling.fit import fit
from trainers.modeling.forward import IGNORE


def encode_conversation(tok, conv: dict, max_length: int | None = None) -> tuple[list[int], list[int]]:
    """(input_ids, labels): labels equal input_ids on assistant tokens and IGNORE elsewhere."""
    out = tok.apply_chat_template(
        conv["messages"], tools=conv.get("tools"), tokenize=True, return_dict=True,
        return_assistant_tokens_mask=True, add_generation_prompt=False,
    )
    ids = list(out["input_ids"])
    mask = list(out["assistant_masks"])
    if max_length and len(ids) > max_length:
        ids, mask = ids[:max_length], mask[:max_length]
    labels = [t if m else IGNORE for t, m in zip(ids, mask)]
    return ids, labels


def encode_all(tok, convs: list[dict], max_length: int) -> tuple[list[tuple[list[int], list[int]]], dict]:
    """The conversations' (input_ids, labels), each cut to `max_length` tokens by trainers/modeling/fit.py's rule
    (older turns dropped, the system prompt, tools, task and last turn kept). Counted: `truncated` (cut and kept),
    `over_max_length` (what the rule keeps is over: left out), `no_assistant_tokens` (left out: nothing to learn)."""
    examples, truncated, over, no_labels = [], 0, 0, 0
    for c in convs:
        ids, labels = encode_conversation(tok, c, None)
        if len(ids) > max_length:
            fitted, _ = fit(c, lambda x: len(chat_ids(tok, x)), max_length)
            if fitted is None:
                over += 1
                continue
            truncated += 1
            ids, labels = encode_conversation(tok, fitted, None)
        if not any(l != IGNORE for l in labels):
            no_labels += 1
            continue
        examples.append((ids, labels))
    return examples, {"examples": len(examples), "truncated": truncated, "over_max_length": over,
                      "no_assistant_tokens": no_labels}


def chat_ids(tok, conv: dict) -> list[int]:
    """The token ids the chat template renders `conv` to (no assistant mask: a measure, cheaper than encoding)."""
    return list(tok.apply_chat_template(conv["messages"], tools=conv.get("tools"), tokenize=True, return_dict=True,
                                        add_generation_prompt=False)["input_ids"])


def length_bucketed_batches(lengths: list[int], batch_size: int, rng: random.Random, bucket_batches: int = 32,
                            groups: list[int] | None = None, by_length: bool = False) -> list[list[int]]:
    """Random batches of one prompt group each (same system prompt + tools, so the shared prefix is long);
    `by_length` also sorts windows of `bucket_batches` batches by length (less padding, but batches of similar
    length are often one task template: measured worse for learning here, so off by default)."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    g = groups or [0] * len(lengths)
    window = batch_size * bucket_batches if by_length else len(idx)
    batches = []
    for s in range(0, len(idx), window):
        key = (lambda i: (g[i], lengths[i])) if by_length else (lambda i: g[i])
        chunk = sorted(idx[s : s + window], key=key)  # stable: random order within a group
        batches.extend(chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(examples, batch: list[int], pad_id: int):
    L = max(len(examples[i][0]) for i in batch)
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), L), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), L), dtype=torch.long)
    for r, i in enumerate(batch):
        x, y = examples[i]
        ids[r, : len(x)] = torch.tensor(x)
        labels[r, : len(y)] = torch.tensor(y)
        att[r, : len(x)] = 1
    return ids, labels, att


def first_label_pos(labels: list[int]) -> int:
    for i, l in enumerate(labels):
        if l != IGNORE:
            return i
    return len(labels)


def shared_prefix_len(examples, batch: list[int], first_labels: list[int]) -> int:
    """Length P of the token prefix every sequence of the batch shares, with no label at positions <= P (so the
    loss computed on the suffixes equals the full-sequence loss exactly)."""
    first = examples[batch[0]][0]
    P = min(len(examples[i][0]) for i in batch) - 1
    P = min(P, min(first_labels[i] for i in batch) - 1)
    for i in batch[1:]:
        x = examples[i][0]
        j = 0
        while j < P and x[j] == first[j]:
            j += 1
        P = j
        if P == 0:
            break
    return max(P, 0)


def collate_suffix(examples, batch: list[int], P: int, pad_id: int):
    """Suffixes after the shared prefix (right padded) + the attention mask over prefix and suffix."""
    L = max(len(examples[i][0]) for i in batch) - P
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), L), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), P + L), dtype=torch.long)
    att[:, :P] = 1
    for r, i in enumerate(batch):
        x, y = examples[i]
        ids[r, : len(x) - P] = torch.tensor(x[P:])
        labels[r, : len(y) - P] = torch.tensor(y[P:])
        att[r, P : len(x)] = 1
    return torch.tensor([examples[batch[0]][0][:P]]), ids, labels, att
