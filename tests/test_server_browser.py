"""`lake serve` as a neighbour of a web browser (issue 11 item 7).

Before: with no token, a cross-origin `text/plain` POST from any web page wrote into the lake (a CORS "simple
request" needs no permission), a page could reset the queue with a GET, a rebound DNS name reached every
route, binding beyond loopback without a token said nothing, and the token showed in `ps`. Now: write routes
take JSON content types only (415), refuse foreign Origin / cross-site Sec-Fetch-Site (403), every route
refuses a Host that is no name of the server (403), and the token comes from LACHESIS_TOKEN or --token-file.
"""
import os
import signal
import subprocess
import time

import httpx
import pytest

from lake import Lake
from tests.ingest_helpers import ServerProcess, free_port, lake_cmd

REC = {"trajectory_id": "from-a-page", "messages": [{"role": "user", "content": "hi"}]}
BODY = b'{"trajectory_id": "from-a-page", "messages": []}'
REG = {"wandb_group": "", "wandb_project": "", "batch_size": 2, "max_token_len": 64, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 0, "num_steps": 1}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    Lake.init(tmp / "lake")
    s = ServerProcess(tmp / "lake", extra=["--allowed-hosts", "lake.internal"], log_path=tmp / "serve.log").start()
    c = httpx.Client(base_url=s.url, timeout=30)
    assert c.post("/register", json=REG).status_code == 200
    yield tmp / "lake", s, c
    s.kill()


def _rows(root) -> int:
    with Lake(root).snapshot() as snap:
        return snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]


@pytest.mark.attack
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_simple_request_content_types_are_refused(srv, ctype):
    root, _, c = srv
    headers = {"Content-Type": ctype} if ctype else {}
    for path in ("/v1/trajectories", "/scored_data"):
        r = c.post(path, content=BODY, headers=headers)
        assert r.status_code == 415 and "application/json" in r.text, (path, r.text)
    assert _rows(root) == 0


@pytest.mark.attack
def test_foreign_origin_and_cross_site_fetches_are_refused(srv):
    root, s, c = srv
    r = c.post("/v1/trajectories", json=REC, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "cross-origin" in r.text
    assert c.post("/v1/trajectories", json=REC, headers={"Origin": "null"}).status_code == 403
    for path in ("/reset_data", "/batch"):  # an <img src> on any page: no Origin, but Sec-Fetch-Site
        assert c.get(path, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403, path
    assert c.get("/reset_data", headers={"Sec-Fetch-Site": "same-site"}).status_code == 403
    assert _rows(root) == 0
    assert c.get("/info").json()["batch_size"] == 2  # the queue was not reset
    # the server's own origin (and clients, which send neither header) still write
    r = c.post("/v1/trajectories", json=REC, headers={"Origin": s.url, "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200 and r.json()["accepted"] == 1


@pytest.mark.attack
@pytest.mark.parametrize("path", ["/v1/stats", "/status", "/latest_example", "/info"])
def test_rebound_host_names_are_refused(srv, path):
    _, s, c = srv
    r = c.get(path, headers={"Host": f"evil.example:{s.port}"})
    assert r.status_code == 403 and "DNS-rebinding" in r.text, r.text
    for ok in (f"localhost:{s.port}", f"127.0.0.1:{s.port}", "lake.internal", f"[::1]:{s.port}"):
        assert c.get(path, headers={"Host": ok}).status_code == 200, ok


@pytest.mark.attack
def test_rebound_host_cannot_write(srv):
    root, s, c = srv
    before = _rows(root)
    r = c.post("/v1/trajectories", json=dict(REC, trajectory_id="rebound"), headers={"Host": f"evil.example:{s.port}"})
    assert r.status_code == 403 and _rows(root) == before


def _serve(tmp_path, *args, env=None) -> tuple[subprocess.Popen, str]:
    """`lake serve ARGS` until healthy (or dead); -> the process and its URL."""
    port = free_port()
    log = open(tmp_path / f"serve-{port}.log", "wb")
    p = subprocess.Popen(lake_cmd() + ["serve", "--lake", str(tmp_path / "lake"), "--port", str(port), *args],
                         stdout=log, stderr=log, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return p, url


def _stop(p: subprocess.Popen, tmp_path) -> str:
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=15)
    return "".join((f.read_text(errors="replace") for f in tmp_path.glob("serve-*.log")))


@pytest.mark.attack
def test_open_bind_without_token_warns_loudly(tmp_path):
    Lake.init(tmp_path / "lake")
    p, _ = _serve(tmp_path, "--host", "0.0.0.0")
    out = _stop(p, tmp_path)
    assert "WARNING" in out and "WITHOUT A TOKEN" in out, out


def test_loopback_bind_does_not_warn(tmp_path):
    Lake.init(tmp_path / "lake")
    p, _ = _serve(tmp_path)
    assert "WARNING" not in _stop(p, tmp_path)


@pytest.mark.attack
@pytest.mark.parametrize("how", ["env", "file"])
def test_token_from_env_or_file_stays_out_of_ps(tmp_path, how):
    Lake.init(tmp_path / "lake")
    secret = "tok-" + "x" * 20
    (tmp_path / "token").write_text(secret + "\n")
    args, env = (["--token-file", str(tmp_path / "token")], None) if how == "file" else ([], {"LACHESIS_TOKEN": secret})
    p, url = _serve(tmp_path, *args, env=env)
    try:
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            assert secret.encode() not in f.read()
        assert httpx.post(url + "/v1/trajectories", json=REC).status_code == 401
        r = httpx.post(url + "/v1/trajectories", json=REC, headers={"Authorization": f"Bearer {secret}"})
        assert r.status_code == 200
    finally:
        out = _stop(p, tmp_path)
    assert "auth=on" in out and "shows in `ps`" not in out


def test_token_on_the_command_line_still_works_with_a_warning(tmp_path):
    Lake.init(tmp_path / "lake")
    p, url = _serve(tmp_path, "--token", "cli-token")
    try:
        assert httpx.post(url + "/v1/trajectories", json=REC, headers={"Authorization": "Bearer cli-token"}
                          ).status_code == 200
    finally:
        out = _stop(p, tmp_path)
    assert "shows in `ps`" in out


# -- Hardening IV items 1-2: --token-file read by one grammar (ingest/config.py read_token_file) -------------------
BAD_TOKEN_FILES = {
    "all-comments": "# clients\n#\n\n",  # it started the server with auth off
    "bare-name-then-named": "clients\nalice tok-alice-1\n",  # `clients` was the only token, alice got 401s
    "duplicate-token": "alice tok-1\nbob tok-1\n",
    "duplicate-name": "alice tok-1\nalice tok-2\n",
}


@pytest.mark.attack
@pytest.mark.parametrize("kind", [*BAD_TOKEN_FILES, "fifo", "dev-zero", "folder", "oversized"])
def test_lake_serve_refuses_a_token_file_at_start_in_one_line(tmp_path, kind):
    path = tmp_path / "tokens"
    if kind == "fifo":
        os.mkfifo(path)  # read, it waits for a writer: the server never starts and says nothing
    elif kind == "dev-zero":
        path = "/dev/zero"  # read, it never ends
    elif kind == "folder":
        path.mkdir()
    elif kind == "oversized":
        path.write_text("".join(f"c{i} tok-{i:07d}\n" for i in range(100_000)))  # 1.7 MB
    else:
        path.write_text(BAD_TOKEN_FILES[kind])
    r = subprocess.run(lake_cmd() + ["serve", "--lake", str(tmp_path / "lake"), "--port", str(free_port()),
                                     "--token-file", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: --token-file {path}: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "lake").exists()


@pytest.mark.attack
def test_lake_serve_takes_named_clients_after_a_one_word_comment(tmp_path):
    """`#clients` first: it was the only token (anyone sending `Bearer #clients` got in, every client a 401).
    With 20,000 clients the last one gets in as fast as the first: one digest lookup per request."""
    Lake.init(tmp_path / "lake")
    clients = {f"client{i}": f"tok-{i:06d}-{'x' * 12}" for i in range(20_000)}
    (tmp_path / "tokens").write_text("#clients\n" + "".join(f"{n} {t}\n" for n, t in clients.items()))
    p, url = _serve(tmp_path, "--token-file", str(tmp_path / "tokens"))
    try:
        for name in ("client0", "client19999"):
            r = httpx.post(url + "/v1/trajectories", json={**REC, "trajectory_id": name},
                           headers={"Authorization": f"Bearer {clients[name]}"})
            assert r.status_code == 200, (name, r.text)
        for wrong in ("Bearer #clients", "Bearer clients", f"Bearer {clients['client7']}x"):
            assert httpx.post(url + "/v1/trajectories", json=REC, headers={"Authorization": wrong}).status_code == 401
        assert httpx.get(url + "/v1/stats").status_code == 401
    finally:
        out = _stop(p, tmp_path)
    assert "auth=on (20000 named clients)" in out, out


def test_the_start_line_says_auth_is_off_only_without_any_token(tmp_path):
    Lake.init(tmp_path / "lake")
    p, _ = _serve(tmp_path, env={"LACHESIS_TOKEN": "", "LAKE_TOKEN": ""})
    assert "auth=off (no --token, --token-file or LACHESIS_TOKEN)" in _stop(p, tmp_path)
