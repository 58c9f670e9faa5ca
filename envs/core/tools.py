"""What an environment's tools are made of: their OpenAI function schemas (and `submit`'s), reading a call's
arguments, and the two ways a call goes wrong (a malformed call, a command that ran and failed), which ToolEnv.step
turns into the call's observation and its reward terms.
"""
from __future__ import annotations

from transcript.toolcalls import ToolCall

SUBMIT_SCHEMA = {"type": "function", "function": {
    "name": "submit", "description": "Finish the task (optionally with a text answer).",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": []}}}


def tool_schema(name: str, description: str, params: dict[str, str], required: list[str] | None = None) -> dict:
    """An OpenAI-style function schema with string parameters."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v}
                                                        for k, v in params.items()},
                       "required": list(params) if required is None else required}}}


class ToolArgumentError(ValueError):
    """A tool call with missing or bad arguments: a malformed call (its message goes back as the result)."""


class ToolFailed(Exception):
    """A well-formed tool call whose command failed (non-zero exit, missing file, unmatched snippet): raised by
    `call_tool` with the observation the agent sees, so the step's reward can count the failure."""

    def __init__(self, observation: str):
        super().__init__(observation)
        self.observation = observation


def str_arg(call: ToolCall, key: str, *, allow_empty: bool = False) -> str:
    value = call.arguments.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ToolArgumentError(f"{call.name} needs a string argument {key!r}")
    return value
