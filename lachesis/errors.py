"""The errors of the CLI face a user can fix: `CommandError`, one line naming a bad option or state of a command
the face itself runs (the demo, `python -m lachesis.demo`: no model, a lake that is not fresh, ...). It derives
from ground's `UserError`: caught once where each command starts (console.py's `App`), printed as one line, exit
code 2. The wings' own errors (TrainerInputError, ServingError, LakeError, edge's OptionError, ...) pass through
the face as they are."""
from __future__ import annotations

from ground.errors import UserError


class CommandError(UserError):
    """Bad input to a command of the face (an option, a work folder). Exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line
