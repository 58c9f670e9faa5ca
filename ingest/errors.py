"""Errors raised by the ingest parsers: one type, carrying where (line, field) and why; and how a lake write that
failed is told to a client (store_failure) and to the server's log (log_line)."""
from __future__ import annotations

import re


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


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PATH = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w.])/)[^\s'\"]*")


def store_failure(exc: BaseException) -> str:
    """What a client may be told of a lake write that failed (a 503's body, an SSE error event): one line, the
    innermost cause without colour codes or paths. deltalake's errors are several lines of an error chain with
    ANSI colour codes and the file it failed on (`Generic LocalFileSystem error / ↳ Unable to open file
    /srv/lake/trajectories/_delta_log/...json / ↳ Operation not permitted (os error 1)`), which is the server's
    business (its log), not an anonymous client's."""
    lines = _chain(exc)
    reason = _PATH.sub("…", lines[-1]) if lines else "no reason given"
    return f"{type(exc).__name__}: {reason}"[:300]


def log_line(exc: BaseException) -> str:
    """The same failure for the server's own log: one line, every link of the chain, paths kept, no colour codes."""
    return f"{type(exc).__name__}: " + " <- ".join(_chain(exc))


def _chain(exc: BaseException) -> list[str]:
    """An error's message as the links of its chain (one per line, deltalake's `↳` marks), colour codes removed."""
    lines = (ln.strip().lstrip("↳").strip() for ln in _ANSI.sub("", str(exc)).splitlines())
    return [ln for ln in lines if ln]
