"""One trajectory row: the record of the lake's `trajectories` table as every writer builds it (the episode
recorder, the Hermes importer, the model server's recorder, online RL's actors), with its columns named once.

`trajectory_row(trajectory_id=..., messages=..., **columns)` takes the table's payload columns by name (COLUMNS:
lake/schemas.py's trajectories payload, which tests/test_message_model.py holds equal) and the envelope inputs a
writer may set (ENVELOPE), refuses any other name, and returns them in the table's order. A column left out is
NULL in the lake. The messages are the message model's (transcript/messages.py), in the lake or the play form; the
token columns of a sampled sequence follow Atropos' conventions (trainers/modeling/token_columns.py).
"""
from __future__ import annotations

from typing import Any

COLUMNS = ("trajectory_id", "group_id", "task_id", "env", "env_tags", "split", "model", "policy_version", "messages",
           "steps", "reward", "success", "tokens", "masks", "inference_logprobs", "advantages", "overrides",
           "metadata", "raw")
ENVELOPE = ("occurred_at", "event_type")


def trajectory_row(*, trajectory_id: str, messages: list[dict], **columns: Any) -> dict:
    """The row with these columns, in the table's order; a name that is not a column is a TypeError."""
    unknown = set(columns) - set(COLUMNS) - set(ENVELOPE)
    if unknown:
        raise TypeError(f"not a column of trajectories: {', '.join(sorted(unknown))}")
    row = {"trajectory_id": trajectory_id, "messages": messages, **columns}
    return {k: row[k] for k in COLUMNS + ENVELOPE if k in row}
