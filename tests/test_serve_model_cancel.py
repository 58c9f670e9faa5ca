"""A client that goes away stops costing generation (issue 38 item 3): its row in the running batch is cancelled at
the next token, so a request that arrives after abandoned streams is answered as if they had never been.

Before: 64 streams that read 4 chunks and disconnected made a 2-token request wait 5-7 s (0.07 s alone): the
engine generated every abandoned row to its max_tokens.
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from serve_model_helpers import client, running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig

LONG = 800  # tokens each abandoned stream asks for (the tiny model, greedy: it runs to the limit)
PROMPT = [{"role": "user", "content": "tell me everything"}]


@pytest.fixture(scope="module")
def server(tiny_dir):
    cfg = ServeModelConfig(model="tiny", record="off", threads=1, max_tokens=LONG, batch_window_ms=50)
    with running(cfg) as (url, app):
        yield url, app


def _abandon(url: str, chunks: int) -> None:
    """A stream read for `chunks` chunks, then the connection closed."""
    body = {"model": "tiny", "messages": PROMPT, "max_tokens": LONG, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for n, _ in enumerate(r.iter_lines()):
            if n >= chunks:
                break


def test_the_abandoned_stream_would_run_long(server):
    """The reference: the same request, not abandoned, generates all LONG tokens (so the test below measures
    cancellation, not an early stop)."""
    url, _ = server
    r = client(url).chat.completions.create(model="tiny", messages=PROMPT, max_tokens=LONG, temperature=0)
    assert r.usage.completion_tokens == LONG and r.choices[0].finish_reason == "length"


@pytest.mark.attack
def test_abandoned_streams_stop_generating_at_the_next_token(server):
    url, app = server
    engine = app.state.serving.engine
    alone = []
    for _ in range(3):
        t0 = time.perf_counter()
        client(url).chat.completions.create(model="tiny", messages=PROMPT, max_tokens=2, temperature=0)
        alone.append(time.perf_counter() - t0)
    threads = [threading.Thread(target=_abandon, args=(url, 4)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    t0 = time.perf_counter()
    r = client(url).chat.completions.create(model="tiny", messages=PROMPT, max_tokens=2, temperature=0)
    after = time.perf_counter() - t0
    assert r.usage.completion_tokens == 2
    print(f"2-token request: {min(alone):.3f} s alone, {after:.3f} s after 16 abandoned streams")
    assert after < max(1.0, 5 * min(alone)), (after, alone)
    assert engine.cancelled_rows >= 16  # /v1/health's count of rows stopped for clients that went away
    assert httpx.get(url + "/v1/health", timeout=5).json()["cancelled_rows"] >= 16
