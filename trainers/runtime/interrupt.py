"""Ctrl-C during a long run: finish the step under way, write a checkpoint, then stop, so `--resume` continues.

A KeyboardInterrupt raised at an arbitrary point may land inside an optimizer step or a lake append, where the
weights and the data position disagree; a checkpoint written from there could not be trusted. So the first
Ctrl-C only asks the loop to stop after the step it is in (one line says so); the loop checkpoints that step and
raises `TrainingInterrupted` naming the command that resumes it. A second Ctrl-C stops at once: the latest
checkpoint already written stands (periodic ones, every `checkpoint_every` steps or `checkpoint_minutes`), and the
message says which.
Signal handlers exist only in the main thread; elsewhere (an actor's thread, a test's worker) Ctrl-C behaves as
Python's default.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; the message is the one line that says where it stopped and how to resume it."""


class StopRequest:
    requested = False


@contextmanager
def stop_on_interrupt(what: str = "the current step") -> Iterator[StopRequest]:
    """While inside: the first SIGINT sets `.requested` (and says so on stderr), the second raises
    KeyboardInterrupt as usual. The previous handler is restored on exit."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True
        print(f"\nstopping after {what} with a checkpoint (Ctrl-C again: stop now, from the latest checkpoint)",
              file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def resume_hint(command: str, run_dir: Path, step: int | None, checkpoint_step: int | None) -> str:
    """The one line a stopped run prints: where it stopped, and the command that continues it."""
    where = f"interrupted after step {step}" if step is not None else "interrupted"
    if checkpoint_step is None:
        return f"{where}, before its first checkpoint: start {command} again (without --resume)"
    return (f"{where}; checkpoint at step {checkpoint_step} in {run_dir}: `{command} --resume {run_dir}` "
            "continues from it")
