"""HTTP limits for the project's servers (`lake serve` and `lake serve-model`, one configuration): how big a
request head may be, how long a client may take to send it and its body, how long a connection may sit idle, and
how many connections may be open at once, in all and from one client address. `uvicorn_config(app, limits, **kw)` is
the one way to build the uvicorn.Config; the limits themselves are `edge.options.HttpLimits` (options with help text,
kept with the light configs).

Why a layer of our own: uvicorn's httptools protocol (what `uvicorn[standard]` picks; h11, which has a head
limit, parses in Python and has no read timeout either) has no header limit and no timeout until a first
response: one 100 MiB header stalled /v1/health for 25-30 s (httptools rebuilds a growing header value), and
idle or slowly written connections were never closed (1,100 of them under `ulimit -n 1024` and the server
could no longer accept, health included). uvicorn's own `limit_concurrency` does not help: it answers 503 to requests, health's too, once
that many connections are open, and still accepts (and holds) every socket.

`LimitedHttpToolsProtocol` is uvicorn's protocol with, per connection:
* a head bound: request line <= `max_request_line_kb` (414), head <= `max_header_kb` and <= `max_headers`
  fields (431), counted as bytes arrive, so an oversized head costs at most one socket read of parsing;
* a head deadline: the request line and headers must arrive within `header_timeout` s of the connection (or
  of the first byte after a keep-alive pause): an idle or slowloris connection is closed (408 if it had sent
  something);
* a body deadline: the whole body must arrive within `body_timeout` s of the head, however steadily it trickles
  (1,050 connections sending a byte every 5 s held `lake serve` full for as long as they kept it up): a 408;
* a body read timeout: while a body is being received, `read_timeout` s without a byte closes it (not counted
  while uvicorn itself paused reading because the app has not consumed what came); the same time without the
  client taking any of an answer waiting in the write buffer aborts it (a client that never reads a large
  /batch would otherwise hold the connection, its socket and the answer's memory for good: uvicorn's close
  waits for the buffer to drain);
* uvicorn's keep-alive timeout (`keep_alive_timeout`) between requests;
* a connection cap: beyond `max_connections` (lowered to fit the open-file limit, see `connection_cap`) the
  connection idle the longest (no request in progress) is aborted to make room, so a flood of idle sockets
  cannot keep a real client (a health probe) out;
* a bound per client address: beyond `max_per_client` connections from one address, that address's connection
  idle the longest is aborted, so one client cannot take the whole cap; a connection younger than YOUNG_S that has
  not begun a request is never that one (it may be a health probe whose head has not come yet: the address's
  next connection closed a probe that connected and then sent its head a moment later). With none older, the
  newcomer is admitted on probation, one of PENDING of its address's: beyond them the oldest that has had HEAR_S
  to send its head and asked nothing is aborted, and only beyond PENDING_MAX a younger one;
* load shedding that keeps health: with none idle to make room, the newcomer is admitted on probation (at most
  PROBATION of them at once): it may ask for a probe path (/v1/health) and is answered; anything else, or nothing
  within `header_timeout`, gets a 503 and the connection is closed.
"""
from __future__ import annotations

import resource
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from edge.options import HttpLimits

PROBATION = 32  # newcomers admitted beyond a bound at once, each for one head's time: for health probes
PENDING = 32  # newcomers beyond its bound one address may hold on probation at once (not counted in PROBATION)
PENDING_MAX = 256  # ... and, while none of them has had HEAR_S to speak (a burst of connections), at most this many
HEAR_S = 0.25  # how long a connection on probation beyond its address's bound is given to send its head
YOUNG_S = 1.0  # a connection this young (or half the head timeout) with no request begun is kept: maybe a probe
PROBE_PATHS = frozenset({b"/v1/health"})  # what a connection on probation may ask for (both servers' liveness)
# open files kept for everything but connections: the lake's data and log files, DuckDB, threads, the
# compactor; at least this many, or an eighth of the limit
FD_RESERVE = 64


def connection_cap(max_connections: int) -> int:
    """`max_connections`, lowered so that connections leave FD_RESERVE open files (or an eighth of the limit)
    to the rest of the server. Raises the soft open-file limit to the hard one first (as Go's runtime does):
    the soft default (1024 on most systems) is what ran out, not the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a hard limit the kernel will not grant: keep the soft one
            pass
    return max(1, min(max_connections, soft - max(FD_RESERVE, soft // 8)))


class _Refused(Exception):
    """Raised from a parser callback: the request breaks a limit (httptools wraps it; see send_400_response)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class _Load:
    """One server's connections by client address, and how many are on probation (shared by its protocols)."""

    def __init__(self) -> None:
        self.by_client: dict[str, int] = {}
        self.probation = 0


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (a subclass per server: `limited_protocol`)."""

    limits: HttpLimits = HttpLimits()
    cap: int = 1000
    load: _Load = _Load()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True  # waiting for, or reading, a request line and headers
        self._head_bytes = 0  # bytes received since this head began (an over-estimate by at most one read)
        self._head_fields = 0
        self._head_size = 0  # request target + header names and values, as parsed
        self._refusal: _Refused | None = None
        self._head_timer = self._body_timer = self._write_timer = self._deadline_timer = None
        self._last_read = 0.0
        self._client = ""  # the peer's address
        self._probation = False  # admitted beyond a bound: may ask for a probe path only
        self._pending = False  # on probation beyond its address's bound (one of PENDING), not counted in PROBATION
        self._heard = False  # pending, and it has had HEAR_S to send its head
        self._connected = 0.0
        self._unsent = 0  # bytes of answers in the write buffer when the write timer was armed

    # -- connections ----------------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._last_read = self._connected = self.loop.time()
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timeout)
        peer = transport.get_extra_info("peername")
        self._client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        load = self.load
        load.by_client[self._client] = load.by_client.get(self._client, 0) + 1
        if load.by_client[self._client] > self.limits.max_per_client:
            self._make_room_for_client()
        if len(self.connections) > self.cap and not self.transport.is_closing():
            self._make_room()

    def _make_room(self) -> None:
        """Over the cap of all connections: close the connection idle the longest (no request in progress; a young one
        only when no other is idle), else admit this one on probation."""
        open_ = [c for c in self.connections if isinstance(c, LimitedHttpToolsProtocol) and not c.transport.is_closing()]
        if len(open_) <= self.cap:
            return
        idle = [c for c in open_ if c is not self and c._idle()]
        if idle:  # abort, not close: a close waits for an unread answer to drain, and keeps the socket meanwhile
            min([c for c in idle if not c._young()] or idle, key=lambda c: c._last_read).transport.abort()
        elif self._probation:  # already, beyond its address's bound
            pass
        elif self.load.probation < PROBATION:
            self._probation = True
            self.load.probation += 1
        else:
            self._refuse(503, self._busy())

    def _make_room_for_client(self) -> None:
        """Over its address's bound: close that address's connection idle the longest unless it is young; with none
        older, admit this one on probation, one of PENDING of the address's (beyond them the oldest of those idle after
        HEAR_S is closed; beyond PENDING_MAX the oldest idle: with none idle, this one is refused, 503)."""
        mine = [c for c in self.connections if isinstance(c, LimitedHttpToolsProtocol) and c is not self
                and c._client == self._client and not c.transport.is_closing()]
        if len(mine) < self.limits.max_per_client:
            return
        idle = [c for c in mine if c._idle()]
        old = [c for c in idle if not c._young()]
        if old:  # abort, not close: a close waits for an unread answer to drain, and keeps the socket meanwhile
            min(old, key=lambda c: c._last_read).transport.abort()
            return
        pending = [c for c in mine if c._pending]
        if len(pending) >= PENDING:
            victims = [c for c in pending if c._heard and c._idle()]
            if not victims and len(pending) >= PENDING_MAX:
                victims = [c for c in pending if c._idle()] or idle
                if not victims:
                    self._refuse(503, self._busy())
                    return
            if victims:
                min(victims, key=lambda c: c._connected).transport.abort()
        self._probation = self._pending = True
        self.loop.call_later(HEAR_S, self._hear)  # and the loop has polled for its bytes since

    def _hear(self) -> None:
        self._heard = True

    def _young(self) -> bool:
        """Connected a moment ago and no request begun: perhaps a probe whose head has not been read yet."""
        return self.cycle is None and self.loop.time() - self._connected < min(YOUNG_S, self.limits.header_timeout / 2)

    def _busy(self) -> str:
        return "too many connections with a request in progress; retry"

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def connection_lost(self, exc) -> None:
        self._cancel_timers()
        load = self.load
        left = load.by_client.get(self._client, 1) - 1
        if left > 0:
            load.by_client[self._client] = left
        else:
            load.by_client.pop(self._client, None)
        if self._probation and not self._pending:
            load.probation -= 1
        self._probation = self._pending = False
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for t in (self._head_timer, self._body_timer, self._write_timer, self._deadline_timer):
            if t is not None:
                t.cancel()
        self._head_timer = self._body_timer = self._write_timer = self._deadline_timer = None

    def pause_writing(self) -> None:
        """The write buffer is over its high-water mark: the client must take some of it within read_timeout."""
        super().pause_writing()
        self._arm_write_timer()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _arm_write_timer(self) -> None:
        self._unsent = self.transport.get_write_buffer_size()
        self._write_timer = self.loop.call_later(self.limits.read_timeout, self._write_timeout)

    def _write_timeout(self) -> None:
        self._write_timer = None
        if not self.flow.write_paused:
            return
        if self.transport.get_write_buffer_size() < self._unsent:  # slow, but taking it
            self._arm_write_timer()
            return
        self.transport.abort()

    # -- bytes ----------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        if self._reading_head:
            if self._head_timer is None:  # the first byte of a request after a keep-alive pause
                self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timeout)
            self._head_bytes += len(data)
        super().data_received(data)
        if self._reading_head and self._head_bytes > self.limits.max_head and not self.transport.is_closing():
            self._refuse(431, f"request head over {self.limits.max_head} bytes")

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers 400 to any parser error, ours included: a limit keeps its own status."""
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(refusal.status, refusal.reason)

    def _refuse(self, status: int, reason: str) -> None:
        """Answer `status` with `reason` and close (the request is never handed to the app)."""
        self._cancel_timers()
        body = reason.encode()
        head = [STATUS_LINE[status]] + [n + b": " + v + b"\r\n" for n, v in self.server_state.default_headers]
        self.transport.write(b"".join(head) + b"content-type: text/plain; charset=utf-8\r\ncontent-length: "
                             + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()

    def _limit(self, status: int, reason: str) -> None:
        self._refusal = _Refused(status, reason)
        raise self._refusal

    # -- parser callbacks -----------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._head_fields = self._head_size = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_target:
            self._limit(414, f"request target over {self.limits.max_target} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_fields += 1
        self._head_size += len(name) + len(value) + 4
        if self._head_fields > self.limits.max_headers:
            self._limit(431, f"more than {self.limits.max_headers} header fields")
        if self._head_size + len(self.url) > self.limits.max_head:
            self._limit(431, f"request head over {self.limits.max_head} bytes")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._probation and self.url.split(b"?", 1)[0] not in PROBE_PATHS:
            self._limit(503, self._busy())
        self._reading_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()
        self._body_timer = self.loop.call_later(self.limits.read_timeout, self._body_timeout)
        self._deadline_timer = self.loop.call_later(self.limits.body_timeout, self._body_deadline)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head, self._head_bytes = True, 0
        for t in (self._body_timer, self._deadline_timer):
            if t is not None:
                t.cancel()
        self._body_timer = self._deadline_timer = None

    # -- timers ---------------------------------------------------------------------------------------------
    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._reading_head or self.transport.is_closing():
            return
        if self._probation:  # admitted beyond a bound to ask for health, and asked for nothing
            self._refuse(503, self._busy())
        elif self._head_bytes:  # a request begun and never finished: say why
            self._refuse(408, f"request head not received within {self.limits.header_timeout:g} s")
        else:  # an idle connection: close it quietly (a 408 could cross a request the client is sending)
            self.transport.close()

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self._reading_head or self.transport.is_closing():
            return
        quiet = self.loop.time() - self._last_read
        if self.flow.read_paused or quiet < self.limits.read_timeout:  # paused by us, or a byte came since
            wait = self.limits.read_timeout if self.flow.read_paused else self.limits.read_timeout - quiet
            self._body_timer = self.loop.call_later(wait, self._body_timeout)
            return
        self.transport.close()  # the app sees the client disconnect

    def _body_deadline(self) -> None:
        """The body took longer than body_timeout in all: 408 (or, once an answer has begun, a close). Time during
        which uvicorn paused reading (the app had not taken what came) is not the client's: looked at again later."""
        self._deadline_timer = None
        if self._reading_head or self.transport.is_closing():
            return
        if self.flow.read_paused:
            self._deadline_timer = self.loop.call_later(self.limits.read_timeout, self._body_deadline)
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            self.transport.close()
            return
        if cycle is not None:  # the app reading the body sees a disconnect, and its answer is not written
            cycle.disconnected = True
            cycle.message_event.set()
        self._refuse(408, f"request body not received within {self.limits.body_timeout:g} s")


def limited_protocol(limits: HttpLimits, cap: int) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, with these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits, "cap": cap,
                                                                          "load": _Load()})


def uvicorn_config(app: Any, limits: HttpLimits, **kwargs: Any) -> uvicorn.Config:
    """A uvicorn.Config for `app` with `limits` (the other options as uvicorn's, in `kwargs`). Raises the soft
    open-file limit (connection_cap): call it in the server process, once, before serving."""
    return uvicorn.Config(app, http=limited_protocol(limits, connection_cap(limits.max_connections)),
                          timeout_keep_alive=limits.keep_alive_timeout, **kwargs)
