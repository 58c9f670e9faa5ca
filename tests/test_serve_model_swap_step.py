"""`lake serve-model --follow`: a new increment is swapped in between two decode steps of the batch in flight, not
after it (Hardening IV item 9: a swap waited 6.6-9.9 s behind a request in flight). The request in flight keeps the
version it was resolved to, token for token; the requests after the swap get the new one.

Measured here (tiny model, 2 busy cores): an increment written while a 2,000-token answer streamed waited for the
rest of it before (5.9 s for a whole model, 12.5 s for a LoRA adapter); now it is served about as fast as with
nothing in flight (7 ms and 57 ms), the answer going on for seconds after.
"""
from __future__ import annotations

import json
import shutil
import threading
import time

import httpx
import pytest

from serve_model_helpers import running
from test_serve_model_slots import _adapter  # a LoRA adapter on the tiny model, random enough to answer differently
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig
from trainers.runtime import checkpoint
from trainers.watch.config import WATCH_FILE

LONG = 2000  # tokens of the answer in flight: seconds of decoding, a few ms a step
PROMPT = "Once upon a time"  # the tiny model's greedy answer to it runs to max_tokens


def _increment(watch, n: int, weights: str) -> None:
    """Increment n of a streaming trainer's folder, as the trainer writes one: complete under a temporary name, then
    renamed (serving/follow.py serves a folder once it has its final name)."""
    tmp = watch / checkpoint.DIR / f"tmp-{n}"
    shutil.copytree(weights, tmp / "weights")
    tmp.rename(watch / checkpoint.DIR / f"{checkpoint.PREFIX}{n:08d}")


def _served(app, n: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        events = [e for e in app.state.serving.follower.events if e["increment"] == n]
        if events:
            assert events[0]["event"] == "served", events
            return events[0]
        assert time.monotonic() < deadline, f"increment {n} not served"
        time.sleep(0.01)


def _stream(url: str, chunks: list) -> None:
    """A long greedy completion, streamed: (time, version, text) per chunk."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": LONG, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                c = json.loads(line[6:])
                chunks.append((time.time(), c["model"], c["choices"][0]["text"]))


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_a_swap_waits_at_most_a_decode_step_behind_a_generation(tiny_dir, tmp_path, kind):
    if kind == "lora":  # the trainer's LoRA increments (copied into the spare adapter slot)
        first, *weights = [_adapter(tiny_dir, tmp_path / f"a{i}", seed=i) for i in (1, 2, 3)]
    else:  # a fully fine-tuned model's increments (the tiny model's own): models of their own
        first, weights = None, [str(tiny_dir)] * 2
    watch = tmp_path / "watch"
    (watch / checkpoint.DIR).mkdir(parents=True)
    (watch / WATCH_FILE).write_text(json.dumps({"config": {}}))
    cfg = ServeModelConfig(model="tiny", adapter=first, follow=str(watch), record="off", threads=1,
                           max_tokens=LONG, poll_interval=0.02, keep_versions=2)
    with running(cfg) as (url, app):
        _increment(watch, 1, weights[0])  # with nothing in flight: what a swap costs
        idle = _served(app, 1)["load_s"]
        v1 = app.state.serving.engine.versions()[-1].name
        chunks: list = []
        streamer = threading.Thread(target=_stream, args=(url, chunks))
        streamer.start()
        try:
            deadline = time.monotonic() + 120
            while len(chunks) < 20:  # the answer is being decoded
                assert streamer.is_alive() and time.monotonic() < deadline, chunks[-3:]
                time.sleep(0.01)
            _increment(watch, 2, weights[1])
            swap = _served(app, 2, timeout=600)
        finally:
            streamer.join()
        v2 = app.state.serving.engine.versions()[-1].name
        short = httpx.post(url + "/v1/completions", json={"model": v1, "prompt": PROMPT, "max_tokens": 200,
                                                          "temperature": 0}, timeout=120).json()
        after = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
                           timeout=120).json()
    times = [t for t, _, _ in chunks]
    step = (times[-1] - times[0]) / (len(times) - 1)  # one decode step, as this machine runs it now
    print(f"{kind}: swap with nothing in flight {idle:.3f} s, behind the answer {swap['load_s']:.3f} s; decode step "
          f"{step * 1000:.1f} ms; the answer went on {times[-1] - swap['at']:.2f} s after the swap")
    assert swap["load_s"] < 5 * (idle + step) + 1.0, (swap, idle, step)  # a deadline: 5.9-12.5 s before
    assert times[-1] - swap["at"] > 1.0  # the swap did not wait for the answer, which went on
    assert {m for _, m, _ in chunks} == {v1} and v2 != v1  # the request in flight kept its version ...
    text = "".join(t for _, _, t in chunks)
    assert text.startswith(short["choices"][0]["text"][:-8]), (text[:200], short)  # ... and its weights, token for token
    assert after["model"] == v2  # the requests after the swap get the new one
