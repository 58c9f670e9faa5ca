"""An unwritable lake under `--record sync` (issue 38 item 6), and what `lake serve` tells clients about one (item 10).

The lake's log folder is made immutable (`chattr +i`, as the red team did): deltalake's append fails with an OSError
whose message is an error chain with ANSI colour codes and the file it failed on. Before: serve-model answered a
plain 500 to chat and completions, cut a stream without an error event, and logged tracebacks; `lake serve`'s 503
carried the colour codes and the lake's internal path, and its /v1/health showed the lake's path to anyone. Now:
a 503 in OpenAI's shape naming the lake, an SSE error event on a stream, one log line per failed call, no path or
colour code in any answer; health shows no path.
"""
from __future__ import annotations

import contextlib
import json
import subprocess

import httpx
import pytest

from serve_model_helpers import running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from lake import Lake
from serving.config import ServeModelConfig
from tests.ingest_helpers import ServerProcess

HI = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@contextlib.contextmanager
def immutable(folder):
    """`folder` immutable for the block (skips where chattr is refused: not root, or a file system without it)."""
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def _clean(text: str, root) -> None:
    assert "\x1b" not in text and str(root) not in text and "_delta_log" not in text, text


@pytest.mark.attack
def test_an_unwritable_lake_is_a_503_naming_the_lake_and_one_log_line(tiny_dir, tmp_path, capfd):
    root = tmp_path / "lake"
    Lake.init(root).append("trajectories", [{"trajectory_id": "seed", "messages": []}])
    cfg = ServeModelConfig(model="tiny", lake_root=str(root), threads=1, record="sync", compact_interval=0)
    with running(cfg) as (url, app):
        assert httpx.post(url + "/v1/chat/completions", json=HI, timeout=60).status_code == 200
        capfd.readouterr()
        with immutable(root / "trajectories" / "_delta_log"):
            answers = [httpx.post(url + "/v1/chat/completions", json=HI, timeout=60),
                       httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
                                  timeout=60)]
            stream = httpx.post(url + "/v1/chat/completions", json={**HI, "stream": True}, timeout=60)
        log = capfd.readouterr().err
        after = httpx.post(url + "/v1/chat/completions", json=HI, timeout=60)
        health = httpx.get(url + "/v1/health", timeout=10).json()
    for r in answers:
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "record_failed" and "recorded in the lake" in err["message"], err
        assert "Operation not permitted" in err["message"]
        _clean(r.text, root)
    assert stream.status_code == 200  # the status went before the record failed: the error is in the stream
    events = [line[6:] for line in stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] != "[DONE]", events[-3:]
    error = json.loads(events[-1])["error"]
    assert error["code"] == "record_failed" and "recorded in the lake" in error["message"], error
    _clean(stream.text, root)
    lines = [ln for ln in log.splitlines() if ln.strip()]
    assert "Traceback" not in log, log
    assert len([ln for ln in lines if "could not be recorded in the lake" in ln]) == 3, log
    assert "\x1b" not in log
    assert after.status_code == 200, after.text  # writable again: recording resumes
    assert health["record_failed"] == 3


@pytest.mark.attack
def test_lake_serve_503_and_health_show_no_path_or_colour(tmp_path):
    root = tmp_path / "lake"
    Lake.init(root).append("trajectories", [{"trajectory_id": "seed", "messages": []}])
    with ServerProcess(root, log_path=tmp_path / "serve.log") as srv:
        health = httpx.get(srv.url + "/v1/health", timeout=10)
        assert health.status_code == 200 and str(root) not in health.text, health.text
        with immutable(root / "trajectories" / "_delta_log"):
            r = httpx.post(srv.url + "/v1/trajectories", json=[{"messages": [{"role": "user", "content": "x"}]}],
                           timeout=30)
        assert r.status_code == 503, r.text
        assert "Operation not permitted" in r.text
        _clean(r.text, root)
        assert httpx.get(srv.url + "/v1/stats", timeout=10).json()["lake"] == str(root)  # behind the token, if set
