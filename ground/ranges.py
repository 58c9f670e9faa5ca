"""Range checks of a config's fields, the one implementation every wing's `__post_init__` (and lachesis.toml's
reader) calls: each named field, unless unset (None), must be at least a minimum, or positive; else one line in the
caller's own error class naming the option as the user types it (`--max-steps`) or, `option=False`, as the key of
a file (`max_steps`)."""
from __future__ import annotations

from ground.errors import UserError


def _label(name: str, option: bool) -> str:
    return "--" + name.replace("_", "-") if option else name


def at_least(cfg: object, minimum: float, *names: str, error: type[UserError] = UserError,
             option: bool = True) -> None:
    """Each named field of `cfg` is at least `minimum`: else `error("--name must be at least M, got V")`."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value < minimum:
            raise error(f"{_label(name, option)} must be at least {minimum:g}, got {value}")


def positive(cfg: object, *names: str, error: type[UserError] = UserError, option: bool = True) -> None:
    """Each named field of `cfg` is above 0 (NaN is not): else `error("--name must be positive, got V")`."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise error(f"{_label(name, option)} must be positive, got {value}")
