"""The errors of the HTTP edge and of the commands' options, shared by both servers and the ingest wing:
`BadInput` (input that can never be taken as it is: a 4xx, or a rejected file; one type, carrying where, line and
field, and why), `TooLarge` (its 413) and `OptionError` (a bad option of a server or ingest command, one line)."""
from __future__ import annotations

from ground.errors import UserError


class OptionError(UserError, ValueError):
    """A bad option of a server or ingest command (`lake serve`, `lake serve-model`, `lake watch`, `lake import`, or
    `just up`, which starts them): one line naming it, a ValueError to the code that checks options."""


class BadInput(ValueError):
    """Input that can never be ingested as it is (a 4xx / a rejected file, never a retry).

    `line` is 1-based within a file or NDJSON body (None for a single JSON document), `field` a dotted
    path or a list of path parts (e.g. ``["body", 0, "tokens", 3]``), `status` the HTTP code to answer.
    """

    def __init__(self, reason: str, *, line: int | None = None, field=None, excerpt: str | None = None,
                 status: int = 400, kind: str = "bad_input"):
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.field = field
        self.excerpt = excerpt
        self.status = status
        self.kind = kind

    def field_str(self) -> str | None:
        if self.field is None:
            return None
        if isinstance(self.field, (list, tuple)):
            return ".".join(str(p) for p in self.field)
        return str(self.field)

    def describe(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.field is not None:
            where.append(f"field {self.field_str()}")
        prefix = (", ".join(where) + ": ") if where else ""
        return prefix + self.reason

    def error_record(self, path, via: str, **metadata) -> dict:
        """This error as an `ingest_errors` record of the file at `path` (`via`: import, watch...)."""
        return {"reason": self.reason, "source_path": str(path), "line": self.line, "field": self.field_str(),
                "excerpt": self.excerpt, "metadata": {"kind": self.kind, "via": via, **metadata}}

    def to_detail(self) -> dict:
        loc = self.field if isinstance(self.field, (list, tuple)) else ([self.field] if self.field else [])
        d = {"type": self.kind, "loc": list(loc), "msg": self.reason}
        if self.line is not None:
            d["line"] = self.line
        return d

    def with_line(self, line: int) -> "BadInput":
        if self.line is None:
            self.line = line
        return self


class TooLarge(BadInput):
    def __init__(self, reason: str, **kw):
        kw.setdefault("status", 413)
        kw.setdefault("kind", "too_large")
        super().__init__(reason, **kw)
