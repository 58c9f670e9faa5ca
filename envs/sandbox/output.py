"""Reading one command's output in the sandbox: kept up to a limit, the command stopped at its deadline, on an
output flood or when the workspace passes its polled quota.

Contract: `collect(fd, poll, deadline, keep, hard_bytes, over_quota)` reads the pipe `fd` until it closes, the
command has exited and its pipe stayed quiet a moment, or a limit is hit; it returns (the first `keep` bytes,
whether more came, why the command must be killed: "" or "timeout", "output flood", "workspace quota exceeded",
whether children still held the pipe after the command exited). It kills nothing and closes nothing: the caller
(sandbox.py) kills what a non-empty reason names and closes `fd`.
"""
from __future__ import annotations

import os
import selectors
import time
from typing import Callable

QUOTA_POLL_S = 0.25  # how often a plain-directory workspace is measured while a command runs
LINGER_S = 0.05  # how long a pipe may stay open after the command exited (a background child holding it)


def collect(fd: int, poll: Callable[[], int | None], deadline: float, keep: int, hard_bytes: int,
            over_quota: Callable[[], bool]) -> tuple[bytes, bool, str, bool]:
    """The output of the command `poll` watches (None while it runs), read from `fd` until `deadline` (monotonic
    seconds); `hard_bytes` is the flood cap, `over_quota()` the polled workspace quota."""
    kept = bytearray()
    seen = 0
    killed = ""
    exited_at: float | None = None
    lingering = False
    next_quota = time.monotonic() + QUOTA_POLL_S
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                killed = "timeout"
                break
            if exited_at is None and poll() is not None:
                exited_at = now
            # A background child can hold the pipe open after the command exits: give it a moment.
            if exited_at is not None and now - exited_at > LINGER_S:
                lingering = True
                break
            if now >= next_quota:
                next_quota = now + QUOTA_POLL_S
                if over_quota():
                    killed = "workspace quota exceeded"
                    break
            wait = min(deadline - now, LINGER_S if exited_at is not None else QUOTA_POLL_S)
            if not sel.select(wait):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += len(chunk)
            room = keep - len(kept)
            if room > 0:
                kept += chunk[:room]
            if seen > hard_bytes:
                killed = "output flood"
                break
    return bytes(kept), seen > keep, killed, lingering
