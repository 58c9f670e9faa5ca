"""What a server says of a lake write that failed: to the client, one line without the lake's paths (`store_failure`),
to its own log, every link of the error chain (`log_line`), and the one answer both servers give a request whose
write did not commit: `LakeWriteFailed`, a 503 (transient: retry). What a lake append can fail with is the lake's
`LAKE_ERRORS` (lake/errors.py)."""
from __future__ import annotations

import re


class LakeWriteFailed(RuntimeError):
    """The lake did not commit a write a request waited for: transient for the client, answered `status` (503,
    retry). `lake serve`'s CommitFailed and `lake serve-model`'s RecordFailed are its kinds; the message is for the
    client (store_failure: the cause in one line, no paths)."""

    status = 503


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
