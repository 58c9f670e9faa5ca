"""`FailedAttempts`: failed attempts by client address in a sliding window, for a route a client could otherwise try
guesses at as fast as it can send them (the browser's login form, ui/login.py).

A client address with `limit` failures within the last `window_s` seconds is refused until the oldest of them leaves
the window (`retry_after`: whole seconds, for a 429's Retry-After), the right answer included, so a guesser learns
nothing while refused. Memory is bounded: at most `max_clients` addresses are tracked (past that, the one whose last
failure is oldest is forgotten) and at most `limit` times per address. The address is the TCP peer's: behind a
proxy every client is the proxy's one address (a flood then locks every browser out for a window, never lets one in).
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from typing import Callable

LOGIN_FAILURES = 10
LOGIN_WINDOW_S = 60.0
MAX_CLIENTS = 10_000


class FailedAttempts:
    def __init__(self, limit: int = LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S, *,
                 max_clients: int = MAX_CLIENTS, clock: Callable[[], float] = time.monotonic):
        if limit < 1 or window_s <= 0 or max_clients < 1:
            raise ValueError("limit, window_s and max_clients must be positive")
        self.limit, self.window_s, self.max_clients, self.clock = limit, window_s, max_clients, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()  # by address, least recently failed first
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until `client` may try again (at least 1), or None when it may now."""
        with self._lock:
            now = self.clock()
            times = self._recent(client, now)
            if times is None or len(times) < self.limit:
                return None
            return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, client: str) -> None:
        """Count one failure of `client` now."""
        with self._lock:
            now = self.clock()
            times = self._recent(client, now)
            if times is None:
                times = self._failures[client] = deque(maxlen=self.limit)
                while len(self._failures) > self.max_clients:
                    self._failures.popitem(last=False)
            self._failures.move_to_end(client)
            times.append(now)

    def __len__(self) -> int:
        """How many addresses are tracked."""
        return len(self._failures)
