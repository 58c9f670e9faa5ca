"""Ctrl-C under `just`: the command takes the terminal's foreground, so `just up` stopped cleanly exits 0.

The terminal sends Ctrl-C's SIGINT to its whole foreground process group, `just` included, and `just` (1.59) then
reports "interrupted by SIGINT" and exits 130 whatever its recipe did; before `exec`, the recipe's shell even died
by the signal ("recipe `up` was terminated on line 49 by signal 2"). A command that stops cleanly on Ctrl-C moves
itself into a process group of its own and makes it the terminal's foreground group, as a shell does for a job: the
keypress then reaches it (and the processes it starts) alone, it stops, and it hands the terminal back to the group
it came from before it exits, so `just` sees exit 0. Without a terminal on stdin (a pipe, CI) nothing changes.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Iterator


@contextlib.contextmanager
def terminal_foreground() -> Iterator[bool]:
    """While inside, this process leads its own process group, the terminal's foreground one; yields whether it
    took it. The previous group gets the terminal back on the way out (SIGTTOU ignored for both hand-overs)."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            yield False  # no terminal, or we are not in its foreground group (a background job)
            return
    except (OSError, ValueError):  # stdin closed or replaced
        yield False
        return
    before = os.getpgrp()
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
        os.tcsetpgrp(fd, os.getpgrp())
    except OSError:
        signal.signal(signal.SIGTTOU, previous)
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, before)
        signal.signal(signal.SIGTTOU, previous)
