"""`lake serve-model` has `lake serve`'s HTTP limits (issue 38 item 1; edge.limits, one HttpLimits for both),
with real sockets on loopback against the real server and the tiny model.

Before: serve-model built a plain uvicorn config: one 100 MiB header answered 200 after 12.3 s, 5,000 header fields
were answered, idle, header-trickling and body-trickling connections stayed open for good, and idle connections
beyond the open-file limit timed out health and chat. Now the same bounds hold as for `lake serve`, here with small
limits so that each attack ends within seconds.
"""
from __future__ import annotations

import time

import httpx
import pytest

from serve_model_helpers import running
from socket_helpers import (HEALTH, Tricklers, ask, closed_within, connect, health_ms, huge_header, post_head,
                            probe_behind_a_crowd, slowloris_head)
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from edge.options import HttpLimits
from serving.config import ServeModelConfig

LIMITS = HttpLimits(header_timeout=1, read_timeout=1, body_timeout=2, keep_alive_timeout=1, max_connections=16,
                    max_per_client=8)
CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
TRICKLE_HEAD = post_head("/v1/chat/completions")


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    cfg = ServeModelConfig(model="tiny", record="off", threads=1, limits=LIMITS)
    with running(cfg) as (url, _app):
        yield url, int(url.rsplit(":", 1)[1])


def chat(url: str, address: str | None = None) -> int:
    port = int(url.rsplit(":", 1)[1])
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(CHAT)}\r\nConnection: close\r\n\r\n").encode()
    answer = ask(connect(port, timeout=30, address=address), head + CHAT)
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_a_chat_within_the_limits_is_answered(server):
    url, _ = server
    assert chat(url) == 200
    r = httpx.get(url + "/v1/health", headers={f"X-{i}": "v" * 100 for i in range(50)}, timeout=5)
    assert r.status_code == 200


@pytest.mark.attack
def test_a_huge_header_is_a_431_and_health_answers_meanwhile(server):
    answer, sent, took, health = huge_header(server[0], "/v1/models")
    assert health < 1000
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert took < 5 and sent < 64 << 20


@pytest.mark.attack
@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(5000)) + b"\r\n",
     b"431"),
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * (80 << 10) + b"\r\n\r\n", b"431"),
    (b"GET /v1/health?" + b"q" * (32 << 10) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"414"),
])
def test_an_oversized_head_is_refused(server, request_bytes, status):
    _, port = server
    assert ask(connect(port), request_bytes).startswith(b"HTTP/1.1 " + status)


@pytest.mark.attack
def test_an_idle_connection_is_closed(server):
    closed, data = closed_within(connect(server[1]), 1.0)
    assert closed and data == b""


@pytest.mark.attack
def test_a_trickled_head_is_a_408(server):
    answer, took = slowloris_head(server[1], b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert took < 5  # the 1 s --header-timeout, with room for a busy machine


@pytest.mark.attack
def test_a_body_that_stops_coming_is_closed(server):
    s = connect(server[1])
    s.sendall(TRICKLE_HEAD)
    closed, _ = closed_within(s, 1.0)
    assert closed


@pytest.mark.attack
def test_a_body_trickled_past_its_deadline_is_a_408(server):
    t0 = time.monotonic()
    drip = Tricklers(server[1], 1, TRICKLE_HEAD, "127.0.0.2")
    try:
        drip.wait(1, 6)
    finally:
        drip.close()
    assert drip.answers.get(0, b"").startswith(b"HTTP/1.1 408"), drip.answers
    assert 1.8 < time.monotonic() - t0 < 4.5


@pytest.mark.attack
def test_health_answers_and_others_get_in_while_one_address_trickles(server):
    """40 trickling bodies from one address: at most 8 (--max-per-client) hold a request; health from that address
    and a chat from another are answered meanwhile."""
    url, port = server
    drip = Tricklers(port, 40, TRICKLE_HEAD, "127.0.0.3")
    try:
        time.sleep(0.3)
        assert ask(connect(port, address="127.0.0.3"), HEALTH).startswith(b"HTTP/1.1 200")
        assert ask(connect(port, address="127.0.0.3"), TRICKLE_HEAD).startswith(b"HTTP/1.1 503")
        assert chat(url, "127.0.0.4") == 200
        assert len(drip.answers) >= 32, len(drip.answers)
    finally:
        drip.close()


@pytest.mark.attack
def test_a_probe_from_the_flooding_address_is_answered_though_more_connections_came(server):
    """Hardening IV item 7 (edge.limits, as for lake serve): the address's share trickles bodies, its probe sends its
    head 0.3 s after connecting, 7 more of its connections having come meanwhile (16 in all: the cap); before, the first of them closed
    the probe before its head came."""
    drip = Tricklers(server[1], 8, TRICKLE_HEAD, "127.0.0.9")
    try:
        answer, took = probe_behind_a_crowd(server[1], "127.0.0.9", crowd=7)
    finally:
        drip.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert took < 3, took


@pytest.mark.attack
def test_idle_connections_beyond_the_cap_do_not_starve_health_or_chat(server):
    """60 idle connections from 6 addresses against a cap of 16: the oldest idle ones are closed to make room, and
    health and a chat answer at once."""
    url, port = server
    socks = [connect(port, address=f"127.0.1.{i % 6 + 1}") for i in range(60)]
    try:
        time.sleep(0.3)
        assert max(health_ms(url) for _ in range(3)) < 1000
        assert chat(url) == 200
        socks[0].settimeout(3)
        assert socks[0].recv(1) == b""  # the oldest was closed to make room
    finally:
        for s in socks:
            s.close()
