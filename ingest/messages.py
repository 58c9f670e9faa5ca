"""Messages as ingest takes them: the message model's one normaliser (transcript/messages.py: roles, content parts,
reasoning spellings, tool calls, replies split by the one parser) with its error as ingest's BadInput, naming the
same field, so a bad message is a 422 or a file line's error like any other bad field. Messages here come in from
outside: a tool call beyond the parser's bounds (transcript/toolcalls.py: nested over 64 levels, over 8 MiB) is such an
error, never a RecursionError.
"""
from __future__ import annotations

from edge.errors import BadInput
from transcript.messages import MessageError, normalize_messages


def lake_messages(msgs, field=None, *, require_content: bool = True) -> tuple[list[dict], bool]:
    """(the messages in the lake form, whether that lost anything: keep the original beside them). Raises BadInput."""
    try:
        return normalize_messages(msgs, field, require_content=require_content, incoming=True)
    except MessageError as exc:
        raise BadInput(exc.message, field=exc.field, kind=exc.kind) from None
