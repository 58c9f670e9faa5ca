"""User-facing errors of the trainers wing.

A `TrainerInputError` carries one line that names what is missing and how to fix it; the CLI prints it and
exits with code 2, never a traceback.
"""
from __future__ import annotations

from ground.errors import UserError


class TrainerInputError(UserError):
    """Bad input from the user (dataset, model path, tokenizer, option). Exit code 2 in the CLI."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line
