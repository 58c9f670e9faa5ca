"""Progress of every long training and evaluation loop, with an ETA, wherever stderr goes.

On a terminal it is Rich's live bar (done/total, elapsed, remaining). When stderr is a file or a pipe (`just up`'s
logs, CI, `2> run.log`) a live bar prints nothing until it ends, so the same calls write one plain line every
`every` seconds (LACHESIS_PROGRESS_EVERY, default 30) and one at the end: `train 120/1800 steps (6%), 2m05s,
ETA 29m10s: loss 1.23`. A console of None (progress off) makes every call a no-op.
"""
from __future__ import annotations

import os
import time


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def plain_every_s() -> float:
    try:
        return max(0.0, float(os.environ.get("LACHESIS_PROGRESS_EVERY", "30")))
    except ValueError:
        return 30.0


class Progress:
    """`with Progress(console, "train", total, unit="steps") as p: p.update(done, info="loss 1.2")`."""

    def __init__(self, console, label: str, total: int | None, *, completed: int = 0, unit: str = "steps",
                 every: float | None = None, style: str = "bold blue"):
        self.console, self.label, self.total, self.unit = console, label, total, unit
        self.done, self.start_done, self.info = completed, completed, ""
        self.every = plain_every_s() if every is None else every
        self.live = console is not None and console.is_terminal
        self.style = style
        self._bar = self._task = None
        self._t0 = self._last = time.monotonic()
        self._printed_at = None

    def __enter__(self) -> "Progress":
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn(f"[{self.style}]{self.label}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[info]}", markup=False), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done, info="")
        return self

    def update(self, completed: int, *, total: int | None = None, info: str | None = None) -> None:
        self.done = completed
        if total is not None:
            self.total = total
        if info is not None:
            self.info = info
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, total=self.total, info=self.info)
        elif self.console is not None and time.monotonic() - self._last >= self.every:
            self._line()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def line(self) -> str:
        """The plain line: done/total, percent, elapsed, ETA (from the rate since this run started), info."""
        elapsed = time.monotonic() - self._t0
        parts = f"{self.label} {self.done}/{self.total if self.total is not None else '?'} {self.unit}"
        if self.total:
            parts += f" ({100 * self.done / self.total:.0f}%)"
        parts += f", {_duration(elapsed)}"
        made = self.done - self.start_done
        if self.total and 0 < made and self.done < self.total:
            parts += f", ETA {_duration(elapsed / made * (self.total - self.done))}"
        return parts + (f": {self.info}" if self.info else "")

    def _line(self) -> None:
        self._last = time.monotonic()
        self._printed_at = self.done
        self.console.print(self.line(), markup=False, highlight=False, soft_wrap=True)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.console is not None and self._printed_at != self.done:
            self._line()  # where it ended: the last line of a log says how far it got
