"""A command option's help text, kept on the field of the command's config dataclass: the one helper every wing's
typed configs declare their help with (the CLI reads it from there: lachesis/console.py's `option`)."""
from __future__ import annotations


def helped(text: str, **kw) -> dict:
    """The keyword arguments of a config `field(...)` with its help text: `field(default=1, **helped("..."))`."""
    return {"metadata": {"help": text}, **kw}


# what every --as-of option's help says (the CLI's AsOfOption and the dataset configs; lake/as_of.py parses it)
AS_OF_HELP = ("Pin the lake: VERSION (every table at min(VERSION, latest)), TABLE=V[,TABLE=V], an ISO 8601 time (each "
              "table as it was committed then, UTC without an offset), or an earlier export's manifest.json (or its "
              "folder) to reproduce it.")
