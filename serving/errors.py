"""The errors of the serving wing a user can fix: `ServingError`, one line naming what is wrong with `lake
serve-model`'s options, its model, adapter or followed trainer, or its vLLM server, and the way out. Like every
wing's errors it derives from ground's `UserError`: the CLI prints it as one line and exits with code 2. What the
trainers' code raises on the way (a model that cannot be resolved, unsafe weights: their `TrainerInputError`) and
the HTTP edge's `OptionError` pass through as they are."""
from __future__ import annotations

from ground.errors import UserError


class ServingError(UserError):
    """Bad input to `lake serve-model` (an option, a model or adapter folder, a followed folder, vLLM). Exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line
