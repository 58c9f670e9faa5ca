"""Issue 37, items 6 and 8: routes the server does not have (Hermes probes five on every conversation) are a 404 and
no rejected request; one access-log line per request (method, route, status, version, tokens, time), none with
--quiet; the server's torch threads default to the CPUs it may use."""
from __future__ import annotations

import re

import httpx

from serve_model_helpers import running
from train_helpers import tiny_dir  # noqa: F401  (the session's tiny model)

from serving.config import ServeModelConfig

PROBES = ["/api/v1/models", "/api/tags", "/v1/props", "/props", "/version"]  # what Hermes asks besides the API
HI = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
LINE = re.compile(STAMP + r"lake serve-model: (\S+) (\S+) (\d{3}|-) (\S+) (\d+\+\d+|-) tokens (\d+\.\d\d) s( \(a route .*\))?$")
STARTED = re.compile(STAMP + r"lake serve-model: POST (\S+) started$")


def _access(err: str) -> list[tuple]:
    return [m.groups() for m in map(LINE.match, err.splitlines()) if m]


def test_unknown_routes_are_404_not_rejections_and_each_request_is_one_line(tiny_dir, tmp_path, capfd):
    cfg = ServeModelConfig(model="tiny", record="off", threads=1, token="s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    with running(cfg) as (url, _app):
        capfd.readouterr()
        probes = [httpx.get(url + p, headers=auth, timeout=10) for p in PROBES]
        probes += [httpx.get(url + p, headers=auth, timeout=10) for p in PROBES]  # a second conversation's probes
        refused = httpx.post(url + "/v1/chat/completions", json=HI, timeout=60)  # no token: a real rejection
        answer = httpx.post(url + "/v1/chat/completions", json=HI, headers=auth, timeout=60)
        streamed = httpx.post(url + "/v1/chat/completions", json={**HI, "stream": True}, headers=auth, timeout=60)
        health = httpx.get(url + "/v1/health", timeout=10).json()
        err = capfd.readouterr().err
    assert [r.status_code for r in probes] == [404] * 10
    assert all(r.json()["error"]["type"] == "not_found_error" for r in probes)
    assert refused.status_code == 401 and answer.status_code == 200 and streamed.status_code == 200
    assert health["rejected"] == 1 and health["unknown_routes"] == 10 and health["failed"] == 0
    lines = _access(err)  # each probe route once, with a note (issue 46 item 9: 70 of 105 lines were probes)
    assert all(g[-1] for g in lines[:5]) and not any(g[-1] for g in lines[5:])
    # a generating request says when it starts, so a call that takes minutes shows in the log while it runs
    assert [m.group(1) for m in map(STARTED.match, err.splitlines()) if m] == ["/v1/chat/completions"] * 3
    assert [(m, p, s) for m, p, s, *_ in lines] == (
        [("GET", p, "404") for p in PROBES] + [("POST", "/v1/chat/completions", s) for s in ("401", "200", "200")]
        + [("GET", "/v1/health", "200")])
    usage = answer.json()["usage"]
    assert lines[6][3] == "tiny@base" and lines[6][4] == f"{usage['prompt_tokens']}+{usage['completion_tokens']}"
    assert lines[7][3] == "tiny@base" and re.fullmatch(r"\d+\+[1-3]", lines[7][4])  # the stream, once it ended
    assert lines[0][3:5] == ("-", "-") and lines[5][3:5] == ("-", "-")


def test_quiet_writes_no_access_line_and_a_path_is_one_line(tiny_dir, capfd):
    with running(ServeModelConfig(model="tiny", record="off", threads=1, quiet=True)) as (url, _app):
        capfd.readouterr()
        assert httpx.post(url + "/v1/chat/completions", json=HI, timeout=60).status_code == 200
        quiet = capfd.readouterr().err
    assert _access(quiet) == []
    with running(ServeModelConfig(model="tiny", record="off", threads=1)) as (url, _app):
        capfd.readouterr()
        httpx.get(url + "/a%0Alake serve-model: forged", timeout=10)
        err = capfd.readouterr().err
    (line,) = [x for x in err.splitlines() if "forged" in x]
    assert re.match(STAMP + r"lake serve-model: GET /a\\nlake serve-model: forged 404", line), line


def test_the_server_uses_the_cpus_it_may_run_on_by_default(tiny_dir, monkeypatch):
    import torch

    from serving.app import load_engine
    from trainers.runtime.device import usable_cpus

    monkeypatch.delenv("LACHESIS_THREADS", raising=False)
    try:
        engine, _ = load_engine(ServeModelConfig(model="tiny", record="off"))
        assert engine.threads == usable_cpus() == torch.get_num_threads()
        monkeypatch.setenv("LACHESIS_THREADS", "1")
        assert load_engine(ServeModelConfig(model="tiny", record="off"))[0].threads == 1
        assert load_engine(ServeModelConfig(model="tiny", record="off", threads=2))[0].threads == 2
    finally:
        torch.set_num_threads(1)

