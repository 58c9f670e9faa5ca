"""UUIDv7 ids (RFC 9562), the one rule of every id the process makes: they sort in the order they were made.

An id is a 48-bit ms timestamp, version 7, a 26-bit counter (rand_a and the top of rand_b: method 1 of RFC 9562
section 6.2), variant 10 and 48 random bits. The timestamp and counter together form one stamp that only grows
in this process: a new id takes the clock's ms with counter 0, or, when the clock has not moved on (or went
back), the last stamp plus one; a burst of more than 2^26 ids in one ms borrows the next ms. `uuid7()` makes one
id; `uuid7_stamps(n)` reserves n consecutive stamps for a caller that formats many at once (the lake's event ids,
lake/envelope.py, vectorised), so ids of both kinds interleave in creation order.
"""
from __future__ import annotations

import os
import threading
import time

COUNTER_BITS = 26
_lock = threading.Lock()
_last = -1  # the last stamp given out: ms << COUNTER_BITS | counter


def uuid7_stamps(n: int, now_ms: int | None = None) -> int:
    """The first of n consecutive stamps (ms << COUNTER_BITS | counter), each above every stamp given out before
    in this process. `now_ms`: the clock to use (default: time.time)."""
    global _last
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    with _lock:
        first = max(ms << COUNTER_BITS, _last + 1)
        _last = first + max(n, 1) - 1
    return first


def _forget() -> None:
    global _lock
    _lock = threading.Lock()  # a forked child gets no lock held by a parent's thread


os.register_at_fork(after_in_child=_forget)


def uuid7_from(stamp: int, rand48: int) -> str:
    """The UUIDv7 text of one stamp and 48 random bits."""
    ms, seq = stamp >> COUNTER_BITS, stamp & ((1 << COUNTER_BITS) - 1)
    value = ((ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (seq >> 14) << 64 | 0b10 << 62 | (seq & 0x3FFF) << 48
             | rand48 & ((1 << 48) - 1))
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7() -> str:
    """A UUIDv7 string, after every id made before in this process."""
    return uuid7_from(uuid7_stamps(1), int.from_bytes(os.urandom(6), "big"))
