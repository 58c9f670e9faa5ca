"""Idempotency across processes and concurrent requests (issue 11 item 3).

Before: two `lake serve` on one lake stored the same trajectory_id and Idempotency-Key twice (each checked
only its own memory); `lake watch` and `lake import` of one file stored every row twice; 8 concurrent
requests with one key on /v1/rewards and /v1/skills stored 7 and 6 rows. Now the dedupe is a property of
the commit (ingest.dedupe under lake.locks' per-table flock) and requests with one key run one at a time.

The cross-process cases are made deterministic: the second process loads its index *before* the first
commits, so its in-memory check cannot see the first's rows; only the commit-time check can.
"""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ingest.dedupe import trajectory_guard
from ingest.importer import run_import
from ingest.watch import Watcher
from lake import Lake
from tests.ingest_helpers import ServerProcess
from tests.lake_helpers import scalar

GROUP = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [1.0, 0.0]}
SKILL = "---\nname: {name}\ndescription: d\n---\nbody {body}\n"


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    """Two servers on one lake, both started (their indexes loaded) before anything is posted."""
    tmp = tmp_path_factory.mktemp("two")
    lk = Lake.init(tmp / "lake")
    lk.append("trajectories", [{"trajectory_id": "seed", "messages": [{"role": "user", "content": "s"}]}])
    a = ServerProcess(tmp / "lake", log_path=tmp / "a.log").spawn()
    b = ServerProcess(tmp / "lake", log_path=tmp / "b.log").spawn()
    a.wait_healthy()
    b.wait_healthy()
    yield tmp / "lake", httpx.Client(base_url=a.url, timeout=30), httpx.Client(base_url=b.url, timeout=30)
    a.kill()
    b.kill()


@pytest.mark.attack
def test_two_servers_store_a_trajectory_id_once(two_servers):
    root, a, b = two_servers
    rec = {"trajectory_id": "twice", "messages": [{"role": "user", "content": "x"}]}
    assert a.post("/v1/trajectories", json=rec).json()["accepted"] == 1
    r = b.post("/v1/trajectories", json=rec).json()
    assert r["accepted"] == 0 and r["duplicates"] == 1, r
    assert scalar(root, "SELECT count(*) FROM trajectories WHERE trajectory_id = 'twice'") == 1


@pytest.mark.attack
def test_two_servers_store_a_keyed_request_once(two_servers):
    root, a, b = two_servers
    body = [{"messages": [{"role": "user", "content": f"k{i}"}]} for i in range(3)]
    key = {"Idempotency-Key": "two-servers-traj"}
    assert a.post("/v1/trajectories", json=body, headers=key).json()["accepted"] == 3
    assert b.post("/v1/trajectories", json=body, headers=key).json()["accepted"] == 0
    key = {"Idempotency-Key": "two-servers-group"}
    assert a.post("/scored_data", json=GROUP, headers=key).status_code == 200
    assert b.post("/scored_data", json=GROUP, headers=key).json().get("duplicate") is True
    key = {"Idempotency-Key": "two-servers-reward"}
    assert a.post("/v1/rewards", json={"trajectory_id": "seed", "reward": 1.0}, headers=key).json()["accepted"] == 1
    assert b.post("/v1/rewards", json={"trajectory_id": "seed", "reward": 1.0}, headers=key).json()["duplicate"]
    key = {"Idempotency-Key": "two-servers-skill"}
    assert a.post("/v1/skills", json={"content": SKILL.format(name="sk2", body=1)}, headers=key).status_code == 200
    assert b.post("/v1/skills", json={"content": SKILL.format(name="sk2", body=1)}, headers=key).json()["duplicate"]
    with Lake(root).snapshot() as snap:
        meta = "json_extract_string(metadata, '$.idempotency_key')"
        assert snap.sql(f"SELECT count(*) FROM trajectories WHERE {meta} = 'two-servers-traj'").fetchall()[0][0] == 3
        assert snap.sql("SELECT count(*) FROM trajectories WHERE group_id = "
                        "(SELECT group_id FROM trajectories WHERE event_type = 'atropos.group' LIMIT 1)"
                        ).fetchall()[0][0] == 2
        assert snap.sql(f"SELECT count(*) FROM rewards WHERE {meta} = 'two-servers-reward'").fetchall()[0][0] == 1
        assert snap.sql("SELECT count(*) FROM skills WHERE name = 'sk2'").fetchall()[0][0] == 1


@pytest.mark.attack
@pytest.mark.parametrize("route", ["/scored_data", "/v1/trajectories", "/v1/rewards", "/v1/skills"])
def test_two_servers_refuse_a_key_reused_with_another_body(two_servers, route):
    """Server b never saw the key (its index was loaded before a committed it): its commit is dropped by the
    lake's guard, and the body it carried, not a's, is answered 409 (issue 26 item 5), not `duplicate`."""
    root, a, b = two_servers
    key = {"Idempotency-Key": f"two-bodies-{route}"}
    first, second = {
        "/scored_data": (GROUP, dict(GROUP, scores=[0.0, 1.0])),
        "/v1/trajectories": ([{"messages": [{"role": "user", "content": "a"}]}],
                             [{"messages": [{"role": "user", "content": "b"}]}]),
        "/v1/rewards": ({"trajectory_id": "seed", "reward": 1.0}, {"trajectory_id": "seed", "reward": 0.0}),
        "/v1/skills": ({"content": SKILL.format(name="two-bodies", body="a")},
                       {"content": SKILL.format(name="two-bodies", body="b")}),
    }[route]
    assert a.post(route, json=first, headers=key).status_code == 200
    r = b.post(route, json=second, headers=key)
    assert r.status_code == 409 and r.json()["type"] == "idempotency_conflict", r.text
    again = b.post(route, json=first, headers=key)
    assert again.status_code == 200 and (again.json().get("duplicate") or again.json().get("duplicates")), again.text
    table = {"/v1/rewards": "rewards", "/v1/skills": "skills"}.get(route, "trajectories")
    assert scalar(root, f"SELECT count(*) FROM {table} WHERE "
                        f"json_extract_string(metadata, '$.idempotency_key') = 'two-bodies-{route}'") == (
        2 if route == "/scored_data" else 1)


@pytest.mark.attack
@pytest.mark.parametrize("route", ["rewards", "skills"])
def test_concurrent_requests_with_one_key_store_one_row(two_servers, route):
    root, a, _ = two_servers
    key = {"Idempotency-Key": f"eight-{route}"}
    if route == "rewards":
        send = lambda _: a.post("/v1/rewards", json={"trajectory_id": "seed", "reward": 0.5}, headers=key)  # noqa: E731
    else:
        send = lambda i: a.post("/v1/skills", json={"content": SKILL.format(name="eight", body=i)}, headers=key)  # noqa: E731
    with ThreadPoolExecutor(8) as pool:
        answers = [(r.status_code, r.json()) for r in pool.map(send, range(8))]
    assert sum(code == 200 and not r.get("duplicate") for code, r in answers) == 1, answers
    if route == "skills":  # 8 bodies under one key: the 7 others are refused (issue 26 item 5), not stored
        assert sum(code == 409 for code, _ in answers) == 7, answers
    table = "rewards" if route == "rewards" else "skills"
    assert scalar(root, f"SELECT count(*) FROM {table} WHERE "
                      f"json_extract_string(metadata, '$.idempotency_key') = 'eight-{route}'") == 1


@pytest.mark.attack
def test_concurrent_versions_of_one_skill_without_a_key_store_one(two_servers):
    root, a, _ = two_servers
    body = {"content": SKILL.format(name="same-eight", body="same")}
    with ThreadPoolExecutor(8) as pool:
        answers = [r.json()["status"] for r in pool.map(lambda _: a.post("/v1/skills", json=body), range(8))]
    assert sorted(answers) == ["committed"] + ["unchanged"] * 7
    assert scalar(root, "SELECT count(*) FROM skills WHERE name = 'same-eight'") == 1


@pytest.mark.attack
@pytest.mark.parametrize("route", ["/scored_data_list", "/v1/trajectories", "/v1/rewards", "/v1/skills"])
def test_a_failed_keyed_request_releases_its_key(two_servers, route):
    """A keyed request that fails (a deeply nested value, here) leaves its key free: the retry with a good
    body is stored (it neither hangs on a leftover claim nor is taken for a duplicate)."""
    root, a, _ = two_servers
    deep = {"leaf": 1}
    for _ in range(300):
        deep = {"x": deep}
    key = {"Idempotency-Key": f"release-{route}"}
    bad, good = {
        "/scored_data_list": ([GROUP, dict(GROUP, overrides=[deep, {}])], [GROUP, GROUP]),
        "/v1/trajectories": ({"messages": [], "metadata": deep}, {"messages": []}),
        "/v1/rewards": ({"trajectory_id": "seed", "reward": 1, "labels": deep}, {"trajectory_id": "seed", "reward": 1}),
        "/v1/skills": ({"name": "rel", "body": "x", "frontmatter": deep}, {"name": "rel", "body": "x"}),
    }[route]
    assert a.post(route, content=json.dumps(bad), headers={**key, "Content-Type": "application/json"},
                  timeout=10).status_code == 422
    r = a.post(route, json=good, headers=key, timeout=10)
    assert r.status_code == 200 and not r.json().get("duplicate") and r.json().get("accepted", 1) >= 1, r.text


@pytest.mark.attack
def test_watch_and_import_of_one_file_store_each_id_once(tmp_path):
    """The watcher has loaded its index; a real `lake import` process then stores the file; the watcher's
    pass over the same records must add nothing."""
    recs = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
            for i in range(2000)]
    data = "".join(json.dumps(r) + "\n" for r in recs)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (tmp_path / "copy.jsonl").write_text(data)
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, inbox_dir=inbox, settle=0)
    r = subprocess.run([sys.executable, "-c", "from lachesis.cli import main; main()", "import",
                        str(tmp_path / "copy.jsonl"), "--lake", str(tmp_path / "lake"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["appended"] == 2000, r.stderr
    (inbox / "traj.jsonl").write_text(data)
    w.scan()
    assert w.stats["trajectories"] == 0 and w.stats["duplicates"] == 2000, w.stats
    assert scalar(tmp_path / "lake", "SELECT count(*) FROM trajectories") == 2000
    assert scalar(tmp_path / "lake", "SELECT count(DISTINCT trajectory_id) FROM trajectories") == 2000


@pytest.mark.attack
def test_import_behind_another_import_stores_nothing_twice(tmp_path):
    """Two Lake objects are two writers with their own index (as two processes): the one that loaded its
    index first and commits second adds nothing, and says so."""
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"trajectory_id": f"t{i}", "messages": []}) + "\n" for i in range(50)))
    Lake.init(tmp_path / "lake")
    first, second = Lake(tmp_path / "lake"), Lake(tmp_path / "lake")
    trajectory_guard(second)  # its index, loaded before the first commits
    assert run_import(first, f).appended == 50
    s = run_import(second, f)
    assert s.appended == 0 and s.duplicates == 50
    assert scalar(tmp_path / "lake", "SELECT count(*) FROM trajectories") == 50
