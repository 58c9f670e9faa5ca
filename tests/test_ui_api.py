"""The UI's read API (issue 48) against `lake ui` and `lake serve` as real processes on loopback over a
real lake (tests/ui_helpers.py): filters, stable pagination at a pinned version while the lake grows, `as_of`,
hostile `where` filters and parameters (one-line 400s naming the parameter, never a 500), auth with and without a
token on both servers, and `lake ui --help`."""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
from pathlib import Path

import httpx
import pytest

from lake import Lake
from tests.ingest_helpers import ServerProcess, lake_cmd
from tests.ui_helpers import BASE, CALL_ID, HOSTILE_ID, LATE_REWARDED, build_lake, _row

PIN = {"as_of": str(BASE)}
QUERY_TIMEOUT = 2.0
QUERY_MEMORY_MB = 64  # every page of this module answers within it; a query past it is stopped


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-api") / "lake"
    return root, build_lake(root)


@pytest.fixture(scope="module")
def client(lake, tmp_path_factory):
    root, _ = lake
    log = tmp_path_factory.mktemp("ui-api-log") / "ui.log"
    extra = ["--query-timeout", str(QUERY_TIMEOUT), "--query-memory-mb", str(QUERY_MEMORY_MB)]
    with ServerProcess(root, command="ui", extra=extra, log_path=log) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            c.server_pid = srv.proc.pid
            yield c


def ids(page: dict) -> list[str]:
    return [r["trajectory_id"] for r in page["rows"]]


def every_page(client, **params) -> list[list[str]]:
    """The ids of each page, following next_cursor to the end."""
    pages, cursor = [], None
    while True:
        r = client.get("/v1/trajectories", params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        pages.append(ids(body))
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


@pytest.mark.parametrize("params, keep", [
    ({"env": "git_repo_env"}, lambda r: r.get("env") == "git_repo_env"),
    ({"split": "test"}, lambda r: r.get("split") == "test"),
    ({"task": "task-1"}, lambda r: r.get("task_id") == "task-1"),
    ({"success": "true"}, lambda r: r.get("success") is True),
    ({"success": "false", "env": "bash_exec_env"},
     lambda r: r.get("success") is False and r.get("env") == "bash_exec_env"),
    ({"min_reward": "0.3", "max_reward": "0.7"}, lambda r: 0.3 <= r.get("reward", -1) <= 0.7),
    ({"policy_version": "v2"}, lambda r: r.get("policy_version") == "v2"),
    ({"source": "lake serve-model"}, lambda r: (r.get("metadata") or {}).get("source") == "lake serve-model"),
    ({"where": "starts_with(trajectory_id, 'b-') AND reward < 0.5"},
     lambda r: r["trajectory_id"].startswith("b-") and r["reward"] < 0.5),
    ({"env": ""}, lambda r: True),  # a blank field (a form sends them) is no filter
])
def test_filters_select_exactly_the_matching_rows(client, lake, params, keep):
    _, rows = lake
    r = client.get("/v1/trajectories", params={**params, **PIN, "limit": 500})
    assert r.status_code == 200, r.text
    want = {tid for tid, row in rows.items() if keep(row)}
    assert want and set(ids(r.json())) == want
    assert r.json()["versions"]["trajectories"] == BASE


def test_a_late_reward_is_the_current_one(client):
    row = client.get(f"/v1/trajectories/{LATE_REWARDED}", params=PIN).json()["trajectory"]
    assert (row["reward"], row["success"], row["original_success"]) == (0.9, True, False)


def test_time_range_and_order(client, lake):
    _, rows = lake
    newest = ids(client.get("/v1/trajectories", params={**PIN, "limit": 500}).json())
    oldest = ids(client.get("/v1/trajectories", params={**PIN, "limit": 500, "order": "oldest"}).json())
    assert sorted(newest) == sorted(rows) and oldest == newest[::-1]
    assert newest[-10:] == [f"a-{i}" for i in range(9, -1, -1)]  # the first commit last, its rows by event id
    # since/until split at the second commit's ingestion time
    b0 = client.get("/v1/trajectories", params={**PIN, "task": "task-0", "env": "git_repo_env"}).json()["rows"][0]
    since = b0["ingested_at"]
    after = set(ids(client.get("/v1/trajectories", params={**PIN, "since": since, "limit": 500}).json()))
    before = set(ids(client.get("/v1/trajectories", params={**PIN, "until": since, "limit": 500}).json()))
    assert after == {t for t in rows if not t.startswith("a-")} and before == {f"a-{i}" for i in range(10)}


def test_pages_at_a_pinned_version_never_repeat_or_skip_while_the_lake_grows(client, lake):
    root, rows = lake
    first = client.get("/v1/trajectories", params={"limit": 4, "where": "trajectory_id <> 'none'"}).json()
    pinned = first["versions"]["trajectories"]
    # a commit lands between pages: the cursor keeps reading the version of the first page
    Lake(root).append("trajectories", [_row(f"late-{i}", i, random.Random(i), env="bash_exec_env") for i in range(3)])
    pages = [ids(first)]
    cursor = first["next_cursor"]
    while cursor:
        body = client.get("/v1/trajectories", params={"limit": 4, "cursor": cursor,
                                                      "where": "trajectory_id <> 'none'"}).json()
        assert body["versions"]["trajectories"] == pinned
        pages.append(ids(body))
        cursor = body["next_cursor"]
    flat = [t for p in pages for t in p]
    assert len(flat) == len(set(flat)) and set(flat) == set(rows)  # none repeated, none skipped, none added
    assert all(len(p) == 4 for p in pages[:-1]) and 0 < len(pages[-1]) <= 4
    # oldest first pages the same rows the other way round
    oldest = [t for p in every_page(client, limit=7, order="oldest", **PIN) for t in p]
    assert oldest == flat[::-1]
    # the newest first page now shows the new commit; as_of keeps the old one
    assert ids(client.get("/v1/trajectories", params={"limit": 3}).json())[0].startswith("late-")
    assert not any(t.startswith("late-") for p in every_page(client, limit=50, **PIN) for t in p)


def test_as_of_pins_every_spelling(client, lake, tmp_path):
    _, rows = lake
    first = {f"a-{i}" for i in range(10)}
    for as_of in ("1", "trajectories=1", '{"trajectories": 1}'):
        body = client.get("/v1/trajectories", params={"as_of": as_of, "limit": 500}).json()
        assert set(ids(body)) == first and body["versions"]["trajectories"] == 1, as_of
    assert client.get(f"/v1/trajectories/{CALL_ID}", params={"as_of": "2"}).status_code == 404  # not yet there
    assert client.get(f"/v1/trajectories/{CALL_ID}", params={"as_of": "3"}).status_code == 200


@pytest.mark.attack
def test_as_of_never_reads_a_file_on_the_server(client, tmp_path):
    """`lake sql --as-of` takes a manifest path; over HTTP a path is refused, so a client cannot make the server
    read its files (nor learn which exist)."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"lake_versions": {"trajectories": 1}}))
    for as_of in (str(manifest), str(tmp_path), "/etc/passwd", "/dev/zero"):
        r = client.get("/v1/trajectories", params={"as_of": as_of})
        assert r.status_code == 400 and r.json()["param"] == "as_of", r.text


def test_one_trajectory_whole_with_messages_and_tool_calls_parsed(client, lake):
    r = client.get(f"/v1/trajectories/{CALL_ID}", params=PIN)
    assert r.status_code == 200, r.text
    row = r.json()["trajectory"]
    assert row["task_id"] == "count-lines-3" and [m["role"] for m in row["messages"]] == [
        "system", "user", "assistant", "tool", "assistant"]
    assert [s["reward"] for s in row["steps"]] == [0.25, 0.75] and row["reward"] == 1.0
    # an id with a slash, quotes and markup is one path segment, percent-encoded
    from urllib.parse import quote
    r = client.get("/v1/trajectories/" + quote(HOSTILE_ID, safe=""), params=PIN)
    assert r.status_code == 200 and r.json()["trajectory"]["trajectory_id"] == HOSTILE_ID


def test_an_unknown_trajectory_is_a_404(client):
    r = client.get("/v1/trajectories/no-such-id", params=PIN)
    assert r.status_code == 404 and "no-such-id" in r.json()["detail"]


def test_versions_and_runs(client):
    v = client.get("/v1/versions", params={"limit": 2}).json()["tables"]
    assert set(v) >= {"trajectories", "runs", "ingest_errors"} and v["runs"]["version"] == 1
    assert [c["version"] for c in v["runs"]["commits"]] == [1, 0]
    runs = client.get("/v1/runs", params=PIN).json()
    assert {r["run_id"] for r in runs["rows"]} == {"run-1", "run-2"}
    run1 = next(r for r in runs["rows"] if r["run_id"] == "run-1")
    assert run1["config"] == {"lr": 0.001} and run1["metrics"] == {"loss": 0.5}  # JSON columns parsed
    assert [r["run_id"] for r in client.get("/v1/runs", params={"kind": "eval"}).json()["rows"]] == ["run-2"]
    one = client.get("/v1/runs", params={"limit": 1}).json()
    two = client.get("/v1/runs", params={"limit": 1, "cursor": one["next_cursor"]}).json()
    assert {one["rows"][0]["run_id"], two["rows"][0]["run_id"]} == {"run-1", "run-2"} and two["next_cursor"] is None
    assert [r["kind"] for r in client.get("/v1/runs", params={"run_id": "run-1"}).json()["rows"]] == ["sft"]


def test_the_loop_by_policy_version(client, lake):
    """Success rate and mean reward per policy_version over the current rows (the late reward of a-3 counted)."""
    _, rows = lake
    body = client.get("/v1/loop", params=PIN).json()
    assert body["versions"]["trajectories"] == BASE
    got = {r["policy_version"]: r for r in body["rows"]}
    assert [r["policy_version"] for r in body["rows"]] == ["v1", "v2", None]  # as the versions first appeared
    for version in got:
        members = [r for r in rows.values() if r.get("policy_version") == version]
        g = got[version]
        assert (g["trajectories"], g["judged"], g["rewarded"]) == (len(members),) * 3
        assert g["successes"] == sum(bool(r["success"]) for r in members)
        assert g["success_rate"] == pytest.approx(g["successes"] / len(members))
        assert g["mean_reward"] == pytest.approx(sum(r["reward"] for r in members) / len(members))
    assert got["v1"]["successes"] == sum(bool(rows[f"a-{i}"]["success"]) for i in range(10))
    assert client.get("/v1/loop", params={"as_of": "1"}).json()["rows"][0]["trajectories"] == 10
    assert client.get("/v1/loop", params={"limit": 3}).status_code == 400


def test_the_read_api_is_in_the_openapi_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/trajectories", "/v1/trajectories/{trajectory_id}", "/v1/versions", "/v1/runs",
            "/v1/loop"} <= set(paths)
    documented = {p["name"] for p in paths["/v1/trajectories"]["get"]["parameters"]}
    assert {"env", "split", "task", "success", "min_reward", "max_reward", "policy_version", "source", "since",
            "until", "where", "as_of", "limit", "cursor"} <= documented
    assert not any(m in ops for ops in paths.values() for m in ("post", "put", "patch", "delete"))  # no write route


@pytest.mark.parametrize("params, param", [
    ({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"), ({"limit": "ten"}, "limit"),
    ({"success": "maybe"}, "success"), ({"min_reward": "nan"}, "min_reward"), ({"max_reward": "1e999"}, "max_reward"),
    ({"since": "yesterday"}, "since"), ({"order": "random"}, "order"), ({"cursor": "garbage!"}, "cursor"),
    ({"cursor": "eyJ2Ijp7fX0"}, "cursor"),  # base64 JSON of the wrong shape
    ({"as_of": "-1"}, "as_of"), ({"as_of": "trajectories=99"}, "as_of"), ({"as_of": "nosuch=1"}, "as_of"),
    ({"evn": "typo"}, "evn"), ({"as_of": "1e9999"}, "as_of"),
])
def test_a_bad_parameter_is_a_one_line_400_naming_it(client, params, param):
    r = client.get("/v1/trajectories", params=params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["param"] == param and body["detail"].startswith(param + ":") and "\n" not in body["detail"]


@pytest.mark.attack
@pytest.mark.parametrize("path, status", [
    ("/v1/trajectories?where=%ff%fe", 400), ("/v1/trajectories?limit=%00", 400), ("/v1/trajectories?env=%00", 200),
    ("/v1/trajectories/%ff", 404), ("/ui/trajectories/%ff%fe", 404), ("/v1/trajectories?%ff=1", 400),
    ("/v1/trajectories?as_of=" + "9" * 5000, 400), ("/v1/trajectories?cursor=" + "A" * 4000, 400),
    ("/v1/trajectories?where=" + "(" * 2000 + "1" + ")" * 2000, 400),
    ("/ui/trajectories?as_of=%7B%22trajectories%22%3A%201e999%7D", 400),
])
def test_bad_bytes_and_huge_values_are_answered_never_a_500(client, path, status):
    r = client.get(path)
    assert r.status_code == status, r.text[:300]


def test_a_parameter_given_twice_is_refused(client):
    r = client.get("/v1/trajectories?env=a&env=b")
    assert r.status_code == 400 and r.json()["param"] == "env"


@pytest.mark.attack
@pytest.mark.parametrize("where", [
    "1=1) UNION SELECT trajectory_id, 1, 2 FROM trajectories --",
    "true); COPY trajectories TO '/tmp/ui-stolen.csv'; SELECT 1 WHERE (true",
    "true; SELECT 1",
    "EXISTS (SELECT * FROM read_text('/etc/passwd'))",
    "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0",
    "(SELECT count(*) FROM glob('/*')) > 0",
    "getenv('HOME') IS NOT NULL",
    "(SELECT count(*) FROM duckdb_settings()) > 0 AND (SELECT 1 FROM read_blob('/proc/self/environ')) = 1",
    "reward >",
])
def test_a_hostile_where_is_refused_and_the_server_lives(client, where, tmp_path):
    r = client.get("/v1/trajectories", params={"where": where})
    assert r.status_code == 400 and r.json()["param"] == "where", r.text
    assert "\n" not in r.json()["detail"]
    assert client.get("/v1/trajectories", params={"limit": 1}).status_code == 200


@pytest.mark.attack
def test_an_expensive_where_is_stopped_at_the_query_time_limit(client):
    t0 = dt.datetime.now()
    r = client.get("/v1/trajectories", params={"where": "(SELECT count(*) FROM range(100000000000)) > 0"})
    took = (dt.datetime.now() - t0).total_seconds()
    assert r.status_code == 400 and r.json()["param"] == "where" and "stopped" in r.json()["detail"], r.text
    assert took < QUERY_TIMEOUT + 8
    assert client.get("/v1/trajectories", params={"limit": 1}).status_code == 200


@pytest.mark.attack
def test_a_where_that_needs_more_memory_than_the_bound_is_stopped_and_the_server_stays_small(client):
    """A filter that builds a 1 GB string (an aggregate DuckDB cannot spill) on a server bounded to 64 MiB a query:
    a 400 naming the bound, the server's peak memory far below the gigabyte, and the next page answers."""
    big = "(SELECT length(string_agg(repeat('x', 1000), ',')) FROM range(1000000)) > 0"
    r = client.get("/v1/trajectories", params={"where": big})
    assert r.status_code == 400 and r.json()["param"] == "where", r.text
    assert f"more than {QUERY_MEMORY_MB} MiB" in r.json()["detail"], r.text
    status = Path(f"/proc/{client.server_pid}/status").read_text()
    peak_mb = int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1]) / 1024
    assert peak_mb < 700, status  # the string alone would be 1,000 MB
    assert client.get("/v1/trajectories", params={"limit": 1}).status_code == 200


def _token_file(tmp_path, token: str):
    path = tmp_path / "tokens"
    path.write_text(f"{token}\n")
    return path


READS = ["/v1/versions", f"/ui/trajectories/{CALL_ID}", "/v1/runs", "/v1/trajectories", "/ui/trajectories", "/ui",
         f"/v1/trajectories/{CALL_ID}", "/ui/runs", "/v1/loop", "/ui/loop"]


def test_auth_on_both_servers_with_and_without_a_token(lake, tmp_path):
    """With a token, the pages and the read API need it on `lake ui` and on `lake serve` (which carries them);
    without one they answer; /v1/health is open either way."""
    root, _ = lake
    token = "s3cret-ui-token"
    servers = {
        "ui+token": ServerProcess(root, command="ui", extra=["--token-file", str(_token_file(tmp_path, token))],
                                  log_path=tmp_path / "ui.log"),
        "serve+token": ServerProcess(root, token=token, log_path=tmp_path / "serve.log"),
        "serve": ServerProcess(root, log_path=tmp_path / "serve-open.log"),
    }
    for s in servers.values():  # all three start at once: one start's wait, not three
        s.spawn()
    try:
        for s in servers.values():
            s.wait_healthy(60)
        for name, s in servers.items():
            with httpx.Client(base_url=s.url, timeout=30) as c:
                auth = {"Authorization": f"Bearer {token}"} if name.endswith("+token") else {}
                if auth:  # refused before any query runs: every read route (a page sends a browser to its login form)
                    for path in READS:
                        r = c.get(path)
                        if path.startswith("/ui"):
                            assert r.status_code == 303 and r.headers["location"] == "/ui/login", (name, path)
                        else:
                            assert r.status_code == 401, (name, path)
                        assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, (name, path)
                for path in READS[1::2]:  # answered with it (or without auth): a page and an API route of each kind
                    r = c.get(path, headers=auth)
                    assert r.status_code == 200, (name, path, r.text)
                assert c.get("/v1/health").status_code == 200
        # `lake serve` still ingests beside the UI, and the UI reads what it committed
        with httpx.Client(base_url=servers["serve"].url, timeout=30) as c:
            rec = {"trajectory_id": "posted-1", "messages": [{"role": "user", "content": "hi"}]}
            assert c.post("/v1/trajectories", json=rec).status_code == 200
            assert c.get("/v1/trajectories/posted-1").json()["trajectory"]["trajectory_id"] == "posted-1"
    finally:
        for s in servers.values():
            s.kill()


def test_lake_ui_help_lists_its_options_with_help():
    out = subprocess.run(lake_cmd() + ["ui", "--help"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    for flag in ("--lake", "--host", "--port", "--token", "--token-file", "--allowed-hosts", "--query-timeout", "--query-memory-mb",
                 "--max-connections", "--header-timeout", "--runs", "--exports", "--screenshots"):
        assert flag in out.stdout, flag
    assert "interrupted" in out.stdout and "read-only web UI" in out.stdout


def test_lake_ui_refuses_a_missing_lake_in_one_line(tmp_path):
    out = subprocess.run(lake_cmd() + ["ui", "--lake", str(tmp_path / "none")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "no lake at" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "none").exists()


def test_as_of_a_time_pins_each_table_as_it_was_committed_then(client, lake):
    """The same spelling as `lake sql --as-of 2026-12-01T10:00:00Z`: each table at its newest version committed at
    or before the time (lake/tables.py version_at). A row's ingested_at is stamped after the previous commit ended
    and before its own: a microsecond before the third commit's rows is after the second commit, before the third."""
    _, rows = lake
    third = client.get(f"/v1/trajectories/{CALL_ID}", params=PIN).json()["trajectory"]["ingested_at"]
    at = (dt.datetime.fromisoformat(third) - dt.timedelta(microseconds=1)).isoformat()
    body = client.get("/v1/trajectories", params={"as_of": at, "limit": 500}).json()
    assert body["versions"]["trajectories"] == 2, body
    assert set(ids(body)) == {t for t in rows if t[:2] in ("a-", "b-")}
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    assert client.get("/v1/trajectories", params={"as_of": now, "limit": 1}).json()["versions"]["trajectories"] >= 3
    before = client.get("/v1/trajectories", params={"as_of": "2000-01-01"})
    assert before.status_code == 400 and before.json()["param"] == "as_of" and "no version" in before.json()["detail"]


# -- a hostile client's parameters and paths ----------------------------------------------------------------------
def _cursor(**fields) -> str:
    import base64

    raw = json.dumps({"v": {"trajectories": 1}, "t": 0, "e": "x", "o": "newest", **fields}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.attack
@pytest.mark.parametrize("params, param", [
    ({"limit": "99999999999999999999999"}, "limit"), ({"limit": "-5"}, "limit"), ({"limit": "1.5"}, "limit"),
    ({"limit": " "}, None),  # blank: the default
    ({"cursor": _cursor(v={"trajectories": 10 ** 9})}, "cursor"),  # a version the lake never had
    ({"cursor": _cursor(v={"trajectories": -1})}, "cursor"), ({"cursor": _cursor(t=2 ** 70)}, "cursor"),
    ({"cursor": _cursor(t="0")}, "cursor"), ({"cursor": _cursor(o="sideways")}, "cursor"),
    ({"cursor": _cursor(v="/etc/passwd")}, "cursor"), ({"cursor": "%%%"}, "cursor"),
    ({"cursor": _cursor(), "as_of": "2"}, "cursor"),  # a cursor of one pin with another pin
    ({"as_of": "9999-12-31T23:59:59Z"}, None),  # a future time: every table as it is now
    ({"as_of": "99999-01-01"}, "as_of"), ({"as_of": "yesterday"}, "as_of"), ({"as_of": "{\"trajectories\": []}"}, "as_of"),
    ({"as_of": "../../etc/passwd"}, "as_of"), ({"as_of": "trajectories=1,trajectories=2"}, None),
    ({"where": "(DELETE FROM trajectories) IS NULL"}, "where"),
    ({"where": "true; DROP TABLE trajectories"}, "where"),
    ({"where": "(SELECT 1 FROM (INSERT INTO trajectories DEFAULT VALUES RETURNING 1)) = 1"}, "where"),
    ({"where": "(SELECT set_config('x', 'y')) IS NULL"}, "where"),
    ({"where": " AND ".join(["reward > 0"] * 300)}, None),  # long but one expression: answered
    ({"where": "NOT " * 1500 + "true"}, "where"),
    ({"where": "[" * 1000 + "]" * 1000}, "where"),
])
def test_absurd_parameters_are_a_one_line_400_naming_them_or_answered(client, params, param):
    """Each is a 400 of one line naming the parameter, or (param None) a normal answer; never a 500, and the server
    answers the next request."""
    r = client.get("/v1/trajectories", params=params)
    if param is None:
        assert r.status_code in (200, 400), r.text[:300]
        if r.status_code == 400:  # the only 400 a long-but-valid filter may get: the parser's own bound
            assert r.json()["param"] == "where", r.text[:300]
    else:
        assert r.status_code == 400, r.text[:300]
        body = r.json()
        assert body["param"] == param and "\n" not in body["detail"] and len(body["detail"]) < 2000, body
    page = client.get("/ui/trajectories", params=params)
    assert page.status_code == r.status_code and "Traceback" not in page.text
    assert client.get("/v1/health").status_code == 200


def test_a_future_as_of_time_reads_the_lake_as_it_is(client):
    now = client.get("/v1/trajectories", params={"limit": 1}).json()["versions"]
    later = client.get("/v1/trajectories", params={"limit": 1, "as_of": "9999-12-31T23:59:59Z"}).json()["versions"]
    assert later == now


@pytest.mark.attack
@pytest.mark.parametrize("raw_path", [
    "/v1/trajectories/..%2f..%2f..%2fetc%2fpasswd", "/ui/trajectories/..%2F..%2Fetc%2Fpasswd",
    "/v1/trajectories/%2e%2e/%2e%2e/etc/passwd", "/ui/trajectories/%2e%2e%2f%2e%2e%2fui%2fapp.py",
    "/ui/trajectories/" + "%2e%2e%2f" * 300 + "etc%2fpasswd", "/v1/trajectories/%00", "/ui/trajectories/%c0%ae%c0%ae",
])
def test_a_path_id_with_traversal_is_one_id_that_is_not_there(client, raw_path):
    """An id is one value looked up in the lake, never a path on the server: a 404 naming (part of) it."""
    r = client.get(raw_path)
    assert r.status_code == 404, r.text[:300]
    assert "root:" not in r.text and "import" not in r.text and len(r.content) < 20_000
    assert "no trajectory" in r.text


@pytest.mark.attack
@pytest.mark.parametrize("raw_path", ["/ui/static/..%2fapp.py", "/ui/static/%2e%2e/app.py", "/ui/static/ui.css/..%2f..%2fapp.py",
                                      "/ui/static/../../pyproject.toml"])
def test_the_stylesheet_route_serves_the_stylesheet_only(client, raw_path):
    r = client.get(raw_path)
    assert r.status_code == 404 and "import" not in r.text and "[project]" not in r.text


@pytest.mark.attack
def test_a_request_target_past_the_edge_limit_is_a_414_before_any_query(client):
    r = client.get("/v1/trajectories", params={"where": " AND ".join(["reward > 0"] * 3000)})
    assert r.status_code == 414 and "\n" not in r.text.strip()
    assert client.get("/v1/health").status_code == 200


@pytest.mark.parametrize("sort, order, key", [
    ("reward", "desc", lambda r: r["reward"]), ("reward", "asc", lambda r: r["reward"]),
    ("task", "asc", lambda r: r.get("task_id")), ("turns", "desc", lambda r: len(r["messages"])),
    ("policy_version", "asc", lambda r: r.get("policy_version")),
])
def test_sorting_pages_through_every_row_in_the_column_order(client, lake, sort, order, key):
    """Sorted by a whitelisted column (then ingestion time, then event id), pages of 4 at the pin list every row
    once, in the column's order; a row without a value sorts below every value."""
    _, rows = lake
    got = [t for p in every_page(client, sort=sort, order=order, limit=4, **PIN) for t in p]
    assert sorted(got) == sorted(rows) and len(got) == len(set(got))
    values = [key(rows[t]) for t in got]
    present = [v for v in values if v is not None]
    nulls = len(values) - len(present)
    if order == "desc":
        assert present == sorted(present, reverse=True) and values[len(present):] == [None] * nulls
    else:
        assert present == sorted(present) and values[:nulls] == [None] * nulls


@pytest.mark.parametrize("params, param", [
    ({"sort": "messages"}, "sort"), ({"sort": "reward; DROP TABLE x"}, "sort"), ({"order": "sideways"}, "order"),
])
def test_only_whitelisted_sorts_are_taken(client, params, param):
    r = client.get("/v1/trajectories", params=params)
    assert r.status_code == 400 and r.json()["param"] == param


def test_a_cursor_keeps_its_sort(client):
    first = client.get("/v1/trajectories", params={"sort": "reward", "limit": 2, **PIN}).json()
    r = client.get("/v1/trajectories", params={"sort": "task", "cursor": first["next_cursor"]})
    assert r.status_code == 400 and r.json()["param"] == "sort"
    r = client.get("/v1/trajectories", params={"cursor": first["next_cursor"]})  # the cursor alone: its sort
    assert r.status_code == 200 and r.json()["sort"] == "reward"


def test_one_trajectory_is_the_views_current_row(client, lake):
    """The conversation's row is views/trajectories_current.sql's, read from that trajectory's events alone
    (ui/sql/trajectory_one.sql): the same event, late rewards and counts (a late-rewarded one, one with a tool
    call, the hostile id, one of each commit)."""
    from urllib.parse import quote

    root, rows = lake
    with Lake.open(root).snapshot(BASE, for_query="SELECT * FROM trajectories_current") as snap:
        want = {r["trajectory_id"]: r for r in snap.arrow(
            "SELECT trajectory_id, event_id, reward, success, original_reward, original_success, reward_events, "
            "reward_event_id, len(messages) AS turns FROM trajectories_current").to_pylist()}
    assert set(want) == set(rows)
    for tid in (LATE_REWARDED, CALL_ID, HOSTILE_ID, "a-0", "b-7", "xss"):
        w = want[tid]
        got = client.get("/v1/trajectories/" + quote(tid, safe=""), params=PIN).json()["trajectory"]
        assert {k: got[k] for k in w if k != "turns"} == {k: v for k, v in w.items() if k != "turns"}, tid
        assert len(got["messages"]) == w["turns"]


def test_a_chart_is_bounded_and_drops_what_is_not_a_number():
    """ui/charts.py: a 20,000-step log is drawn as at most MAX_POINTS points (first and last kept), NaN and inf and
    text are dropped, marks are bounded, and an empty series is an empty chart (the page says so)."""
    from ui.charts import MAX_MARKS, MAX_POINTS, line_chart

    steps = [(s, 1.0 / s) for s in range(1, 20_001)] + [(20_001, float("nan")), (20_002, float("inf")),
                                                         ("x", 1.0), (20_003, None)]
    c = line_chart("loss", {"loss": steps}, x_label="step", y_label="loss",
                   marks=[(i, f"m{i}") for i in range(MAX_MARKS * 3)] + [(float("nan"), "bad")])
    pts = c.series[0].points
    assert len(pts) == MAX_POINTS and (pts[0].x, pts[-1].x) == (1.0, 20_000.0)
    assert len(c.marks) == MAX_MARKS and all(m.label != "bad" for m in c.marks)
    assert all(c.left <= p.px <= c.left + c.plot_w and c.top <= p.py <= c.top + c.plot_h for p in pts)
    assert line_chart("none", {"loss": [(1, None)]}, x_label="x", y_label="y").empty
    one = line_chart("one", {"a": [(3, 0.5)]}, x_label="x", y_label="y")  # a single point still has a range
    assert not one.empty and len(one.series[0].points) == 1
