"""A conversation cut to a length budget by one rule, measured in characters before it is tokenized
(trainers/sft/data.py: what a row may cost to tokenize) and in tokens after (trainers/modeling/batches.py: what
the model trains on).

The rule keeps what the model must see to learn the turn it is trained on:
- the head, whole: the leading system messages (the system prompt, which the chat template renders together with
  the tool schemas) and the first user message after them (the task);
- the turn being trained, whole: the last assistant message and the messages since the assistant message before
  it (the tool results or the user message it answers). Messages after the last assistant message carry no label
  and go first;
- in between, whole turns (an assistant message and the messages since the one before it) are dropped oldest
  first, as few as make the conversation fit. A kept turn may then start with a tool result whose call was in a
  dropped turn.

A conversation whose head and last turn alone are over the budget cannot be cut by this rule: `fit` returns None
and the caller leaves the row out and counts it (`over_max_length`). Cutting the tail instead, as a plain
truncation does, keeps the system prompt and drops every assistant token of an agent's conversation whose
prompt is long (Hermes' system prompt with its tool schemas is 2,381 SmolLM2 tokens).
"""
from __future__ import annotations

from typing import Callable


def head_and_turns(messages: list[dict]) -> tuple[list[dict], list[list[dict]]]:
    """(the head, the turns up to the last assistant message): each turn ends with an assistant message."""
    n = 0
    while n < len(messages) and messages[n]["role"] == "system":
        n += 1
    if n < len(messages) and messages[n]["role"] == "user":
        n += 1
    turns, current = [], []
    for m in messages[n:]:
        current.append(m)
        if m["role"] == "assistant":
            turns.append(current)
            current = []
    return messages[:n], turns  # `current`: what follows the last assistant message, no label


def fit(conv: dict, size: Callable[[dict], int], budget: int) -> tuple[dict | None, bool]:
    """(`conv` cut by the rule so that `size(conv) <= budget`, whether it was cut); (None, True) when its head and
    last turn alone are over. `size` must not grow when messages are removed: the cut is found by bisection, so
    a long conversation is measured a few times, not once per turn."""
    if size(conv) <= budget:
        return conv, False
    head, turns = head_and_turns(conv["messages"])
    if not turns:
        return None, True

    def dropping(k: int) -> dict:
        return {**conv, "messages": head + [m for t in turns[k:] for m in t]}

    lo, hi = 0, len(turns) - 1  # the fewest oldest turns dropped (0: only the unlabelled tail) that make it fit
    if size(dropping(hi)) > budget:
        return None, True
    while lo < hi:
        mid = (lo + hi) // 2
        if size(dropping(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return dropping(lo), True
