"""A reward posted to `lake serve` for a trajectory another process wrote after the server started (lake
serve-model's recorded calls, `just up --serve-model`'s loop; issue 25) is accepted: the server's id index catches
up with the lake on an unknown id before answering 404 (it answered 404 until its own next commit)."""
from __future__ import annotations

import httpx

from ingest_helpers import ServerProcess
from lake_helpers import trajectory


def test_a_reward_for_a_trajectory_written_by_another_process_after_start(tmp_path):
    from lake import Lake

    root = tmp_path / "lake"
    Lake.init(root)
    with ServerProcess(root) as server:
        other = Lake.open(root)  # another writer: its own Lake object, its own index
        other.append("trajectories", [trajectory(1, trajectory_id="written-elsewhere")])
        r = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "written-elsewhere", "reward": 0.5})
        assert r.status_code == 200, r.text
        missing = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "never-written", "reward": 1.0})
        assert missing.status_code == 404 and "never-written" in missing.text
    with Lake.open(root).snapshot() as snap:
        assert snap.sql("SELECT trajectory_id, reward FROM rewards").fetchall() == [("written-elsewhere", 0.5)]


# -- Hardening IV item 8: a reward names its client, and a named client rewards only its own trajectories --------
import json  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

from ingest_helpers import free_port, lake_cmd  # noqa: E402

TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-0123456789", "judge": "tok-judge-0123456789"}
GROUP = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [1.0, 0.0]}
REG = {"wandb_group": "", "wandb_project": "", "batch_size": 2, "max_token_len": 64, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 0, "num_steps": 1}


def _as(name: str) -> dict:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def _rows(root, sql: str, *params) -> list:
    from lake import Lake

    with Lake.open(root).snapshot() as snap:
        return snap.con.execute(sql, list(params)).fetchall()


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """`lake serve` with three named clients, `judge` marked as a grader; `bob-1` posted by bob and `unowned`
    written by another process (no client: `lake import`, a watcher, a server without named tokens)."""
    from lake import Lake

    tmp = tmp_path_factory.mktemp("owners")
    root = tmp / "lake"
    Lake.init(root).append("trajectories", [trajectory(1, trajectory_id="unowned")])
    (tmp / "tokens").write_text("# clients\nalice {alice}\nbob {bob}\n\njudge {judge}   grader\n".format(**TOKENS))
    with ServerProcess(root, extra=["--token-file", str(tmp / "tokens")], log_path=tmp / "serve.log") as server:
        r = httpx.post(server.url + "/v1/trajectories", json=trajectory(2, trajectory_id="bob-1"), headers=_as("bob"))
        assert r.status_code == 200, r.text
        yield server, root


@pytest.mark.attack
def test_a_named_client_cannot_reward_another_clients_trajectory(clients):
    server, root = clients
    before = _rows(root, "SELECT count(*) FROM rewards")
    for body in ({"trajectory_id": "bob-1", "reward": 1.0},
                 {"trajectory_id": "unowned", "reward": 1.0},  # posted by nobody named: not alice's either
                 {"trajectory_id": "bob-1", "reward": 1.0, "metadata": {"client": "bob"}},  # claiming to be bob
                 [{"trajectory_id": "alice-own", "reward": 0.5}, {"trajectory_id": "bob-1", "reward": 1.0}]):
        if isinstance(body, list):  # one of alice's own in the same request: nothing of it is written either
            assert httpx.post(server.url + "/v1/trajectories", json=trajectory(3, trajectory_id="alice-own"),
                              headers=_as("alice")).status_code == 200
        r = httpx.post(server.url + "/v1/rewards", json=body, headers=_as("alice"))
        tid = "unowned" if '"unowned"' in json.dumps(body) else "bob-1"
        assert r.status_code == 403, (body, r.status_code, r.text)
        assert "\n" not in r.text and r.json()["type"] == "forbidden" and repr(tid) in r.json()["detail"], r.text
        assert "bob" not in r.json()["detail"].replace("'bob-1'", "")  # the owner's name is not told
    assert httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "bob-1", "reward": 1.0},
                      headers={"Authorization": "Bearer tok-nobody"}).status_code == 401
    assert httpx.get(server.url + "/v1/health").status_code == 200  # still up
    assert _rows(root, "SELECT count(*) FROM rewards") == before  # nothing written


def test_a_named_client_rewards_its_own_trajectory_and_both_rows_name_it(clients):
    server, root = clients
    r = httpx.post(server.url + "/v1/trajectories", json=trajectory(4, trajectory_id="alice-1"), headers=_as("alice"))
    assert r.status_code == 200, r.text
    r = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "alice-1", "reward": 0.25,
                                                      "metadata": {"client": "bob", "note": "kept"}},
                   headers=_as("alice"))
    assert r.status_code == 200, r.text
    (meta,), = _rows(root, "SELECT metadata FROM rewards WHERE trajectory_id = $1", "alice-1")
    assert json.loads(meta) == {"note": "kept", "client": "alice"}  # the token's name, whatever the body said
    assert _rows(root, "SELECT json_extract_string(metadata, '$.client') FROM trajectories "
                       "WHERE trajectory_id IN ('alice-1', 'bob-1') ORDER BY trajectory_id") == [("alice",), ("bob",)]
    forbidden = httpx.post(server.url + "/v1/rewards", json={"trajectory_id": "alice-1", "reward": 1.0},
                           headers=_as("bob"))
    assert forbidden.status_code == 403 and "alice-1" in forbidden.text


@pytest.mark.attack
def test_a_trajectory_claiming_another_client_in_its_metadata_is_still_its_posters(clients):
    server, root = clients
    forged = [trajectory(5, trajectory_id="forged-dict", metadata={"client": "bob"}),
              trajectory(6, trajectory_id="forged-text", metadata='{"client": "bob"}')]  # JSON text is stored as is
    r = httpx.post(server.url + "/v1/trajectories", json=forged, headers=_as("alice"))
    assert r.status_code == 200, r.text
    assert _rows(root, "SELECT DISTINCT json_extract_string(metadata, '$.client') FROM trajectories "
                       "WHERE trajectory_id LIKE 'forged-%'") == [("alice",)]
    for tid in ("forged-dict", "forged-text"):
        assert httpx.post(server.url + "/v1/rewards", json={"trajectory_id": tid, "reward": 1.0},
                          headers=_as("bob")).status_code == 403
    assert _rows(root, "SELECT count(*) FROM rewards WHERE trajectory_id LIKE 'forged-%'") == [(0,)]
    for route, body in (("/v1/rewards", {"trajectory_id": "forged-dict", "reward": 1.0, "metadata": ["bob"]}),
                        ("/v1/trajectories", trajectory(7, trajectory_id="forged-list", metadata="not json"))):
        r = httpx.post(server.url + route, json=body, headers=_as("alice"))  # no object to hold the client's name
        assert r.status_code == 422 and "metadata" in r.text, (route, r.status_code, r.text)
    assert _rows(root, "SELECT count(*) FROM trajectories WHERE trajectory_id = 'forged-list'") == [(0,)]


def test_a_grader_may_reward_any_clients_trajectory(clients):
    server, root = clients
    r = httpx.post(server.url + "/v1/rewards", headers=_as("judge"),
                   json=[{"trajectory_id": "bob-1", "reward": 0.75}, {"trajectory_id": "unowned", "success": True}])
    assert r.status_code == 200, r.text
    assert _rows(root, "SELECT trajectory_id, json_extract_string(metadata, '$.client') FROM rewards "
                       "WHERE trajectory_id IN ('bob-1', 'unowned') ORDER BY trajectory_id") == [
        ("bob-1", "judge"), ("unowned", "judge")]
    assert "auth=on (3 named clients, 1 grader)" in (root.parent / "serve.log").read_text()


def test_an_atropos_group_is_its_posters_to_reward(clients):
    server, root = clients
    assert httpx.post(server.url + "/register", json=REG, headers=_as("alice")).status_code == 200
    assert httpx.post(server.url + "/scored_data", json=GROUP, headers=_as("alice")).status_code == 200
    rows = _rows(root, "SELECT trajectory_id, json_extract_string(metadata, '$.client') FROM trajectories "
                       "WHERE event_type = 'atropos.group' ORDER BY trajectory_id")
    assert len(rows) == 2 and {c for _, c in rows} == {"alice"}, rows
    tid = rows[0][0]
    assert httpx.post(server.url + "/v1/rewards", json={"trajectory_id": tid, "reward": 1.0},
                      headers=_as("bob")).status_code == 403
    assert httpx.post(server.url + "/v1/rewards", json={"trajectory_id": tid, "reward": 1.0},
                      headers=_as("alice")).status_code == 200


@pytest.mark.attack
@pytest.mark.parametrize("third", ["Grader", "s3cret-admin"])
def test_a_token_file_line_with_another_third_word_is_refused_at_start(tmp_path, third):
    path = tmp_path / "tokens"
    path.write_text(f"alice tok-a grader\nbob tok-b {third}\n")
    r = subprocess.run(lake_cmd() + ["serve", "--lake", str(tmp_path / "lake"), "--port", str(free_port()),
                                     "--token-file", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: --token-file {path}: line 2 ") and r.stderr.count("\n") == 1, r.stderr
    assert "a third word can only be `grader`" in r.stderr and third not in r.stderr  # (it may be a token)
    assert "Traceback" not in r.stderr and not (tmp_path / "lake").exists()


def test_auth_off_and_a_single_token_keep_one_identity(tmp_path):
    """Without named tokens every client is the one identity: any known trajectory may be rewarded (one a named
    client of `lake serve-model` recorded included) and nothing is stamped, as before."""
    from lake import Lake

    root = tmp_path / "lake"
    Lake.init(root).append("trajectories", [trajectory(1, trajectory_id="recorded", metadata={"client": "alice"})])
    for n, token in enumerate((None, "the-only-token")):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        with ServerProcess(root, token=token) as server:
            r = httpx.post(server.url + "/v1/trajectories", json=trajectory(2 + n, trajectory_id=f"posted-{n}"),
                           headers=auth)
            assert r.status_code == 200, r.text
            r = httpx.post(server.url + "/v1/rewards", headers=auth, json=[
                {"trajectory_id": "recorded", "reward": 0.5}, {"trajectory_id": f"posted-{n}", "reward": 1.0,
                                                               "metadata": {"note": n}}])
            assert r.status_code == 200, r.text
    assert _rows(root, "SELECT metadata FROM rewards WHERE trajectory_id LIKE 'posted-%' ORDER BY trajectory_id") == [
        ('{"note":0}',), ('{"note":1}',)]
    assert _rows(root, "SELECT count(*) FROM trajectories WHERE trajectory_id LIKE 'posted-%' "
                       "AND metadata IS NOT NULL") == [(0,)]
