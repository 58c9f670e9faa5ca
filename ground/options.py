"""A command option's help text, kept on the field of the command's config dataclass: the one helper every wing's
typed configs declare their help with (the CLI reads it from there: lachesis/console.py's `option`)."""
from __future__ import annotations


def helped(text: str, **kw) -> dict:
    """The keyword arguments of a config `field(...)` with its help text: `field(default=1, **helped("..."))`."""
    return {"metadata": {"help": text}, **kw}
