"""`lake serve-model` refuses bad input with a clear 4xx in OpenAI's error shape and stays up; a bad adapter is a
one-line error at start; loopback by default; --token guards every route but /v1/health; --record async and off."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import openai
import pytest

from serve_model_helpers import TOOLS, client, lake_rows, running
from train_helpers import REPO, tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig
from serving.errors import ServingError
from trainers.runtime.errors import TrainerInputError

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    lake = tmp_path_factory.mktemp("bad") / "lake"
    cfg = ServeModelConfig(model="tiny", lake_root=str(lake), threads=1, token="s3cret", context=96)
    with running(cfg) as (url, app):
        yield url, app, lake


def post(url: str, body, **kw) -> httpx.Response:
    headers = {"Authorization": "Bearer s3cret", "Content-Type": "application/json", **kw.pop("headers", {})}
    return httpx.post(url + "/v1/chat/completions", content=body if isinstance(body, bytes) else None,
                      json=None if isinstance(body, bytes) else body, headers=headers, timeout=60, **kw)


@pytest.mark.attack
@pytest.mark.parametrize("body, status, param, words", [
    (b'{"model": "tiny", "messages": [', 400, "body.31", "JSON decode error"),
    ({"model": "gpt-4o", "messages": HI}, 404, "model", "not served here"),
    ({"model": "tiny", "messages": HI, "tools": [{"type": "function", "function": {"name": "has space"}}]},
     400, "tools.0.function.name", "function name"),
    ({"model": "tiny", "messages": HI, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "array"}}}]}, 400, "tools.0.function.parameters", "type object"),
    ({"model": "tiny", "messages": HI, "tools": [{"type": "retrieval"}]}, 400, "tools.0.type", "function"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "word " * 200}]}, 400, "messages",
     "context of 96 tokens"),
    ({"model": "tiny", "messages": HI, "max_tokens": 10 ** 9}, 400, "max_tokens", "above this server's limit"),
    ({"model": "tiny", "messages": HI, "max_tokens": 90}, 400, "messages", "context of 96"),
    ({"model": "tiny", "messages": HI, "n": 2}, 400, "n", "n > 1 is not supported"),
    ({"model": "tiny", "messages": []}, 400, "messages", "at least 1"),
    ({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", "Input should be"),
    ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages.0.content.0.type", "text only"),
    ({"model": "tiny", "messages": HI, "temperature": 5}, 400, "temperature", "less than or equal to 2"),
    ({"model": "tiny", "messages": HI, "tool_choice": "required", "tools": TOOLS}, 400, "tool_choice", "auto or none"),
    ([1, 2, 3], 400, None, "JSON object"),
])
def test_bad_request_is_a_clear_4xx_and_the_server_stays_up(server, body, status, param, words):
    url, app, _ = server
    r = post(url, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["param"] == param, err
    assert "\n" not in err["message"] and "Traceback" not in r.text
    ok = post(url, {"model": "tiny", "messages": HI, "max_tokens": 2})
    assert ok.status_code == 200, ok.text


@pytest.mark.attack
def test_token_guards_every_route_but_health(server):
    url, _, _ = server
    assert httpx.get(url + "/v1/health").status_code == 200
    assert httpx.get(url + "/v1/models").status_code == 401
    with pytest.raises(openai.AuthenticationError):
        client(url, token="wrong").chat.completions.create(model="tiny", messages=HI, max_tokens=2)
    assert client(url, token="s3cret").models.list().data[0].id == "tiny@base"
    assert httpx.get(url + "/v1/models", headers={"Host": "evil.example", "Authorization": "Bearer s3cret"}
                     ).status_code == 403  # a DNS-rebound name
    assert httpx.get(url + "/openapi.json").status_code in (401, 404)  # no schema pages with a token


def test_loopback_by_default_and_bad_options_are_one_line():
    assert ServeModelConfig().host == "127.0.0.1"
    for kw, words, error in (({"record": "maybe"}, "--record", ServingError),
                             ({"adapter": "no-such-run", "follow": "b"}, "no-such-run", TrainerInputError),
                             ({"promote_if_better": True}, "--follow", ServingError),
                             ({"max_tokens": 8, "default_max_tokens": 9}, "above", ServingError)):
        with pytest.raises(error, match=words):
            ServeModelConfig(**kw)


def test_bad_adapter_path_at_start_is_a_one_line_error(tiny_dir, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", "from lachesis.cli import main; main()", "serve-model", "--adapter",
                        str(tmp_path / "no-such-run"), "--port", "0", "--no-record"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=str(REPO))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-run" in lines[0] and "does not exist" in lines[0], r.stderr


@pytest.mark.parametrize("mode", ["async", "off"])
def test_record_async_lands_and_off_records_nothing(tiny_dir, tmp_path, mode):
    lake = tmp_path / "lake"
    cfg = ServeModelConfig(model="tiny", lake_root=str(lake), threads=1, record=mode)
    with running(cfg) as (url, app):
        raw = client(url).chat.completions.with_raw_response.create(model="tiny", messages=HI, max_tokens=2)
        if mode == "async":
            tid = raw.headers["x-lachesis-trajectory"]
            deadline = time.monotonic() + 30
            while not app.state.serving.recorder.recorded:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    if mode == "async":
        assert [r["trajectory_id"] for r in lake_rows(lake)] == [tid]
    else:
        assert "x-lachesis-trajectory" not in raw.headers and not lake.exists()
