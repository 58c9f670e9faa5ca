"""What every command's typed config shares: the help-text helper, bound checks and the default seed."""
from __future__ import annotations

from trainers.runtime.errors import TrainerInputError


def helped(text: str, **kw) -> dict:
    """The keyword arguments of a config `field(...)` with its help text: `field(default=1, **helped("..."))`."""
    return {"metadata": {"help": text}, **kw}


def at_least(cfg, minimum: float, *names: str) -> None:
    """`__post_init__` validation: each named field (None = unset) is at least `minimum`, else the one-line error."""
    for name in names:
        v = getattr(cfg, name)
        if v is not None and v < minimum:
            flag = "--" + name.replace("_", "-")
            raise TrainerInputError(f"{flag} must be at least {minimum:g}, got {v}")


DEFAULT_SEED = 0


GRADIENT_CHECKPOINTING_HELP = (
    "recompute activations in the backward pass instead of keeping them: less memory, same gradients (SmolLM2 on a "
    "CPU: 4.1 instead of 6.8 GB for a 2,000-token SFT sequence, 6.2 instead of 11.1 GB for a GRPO update of two)")
