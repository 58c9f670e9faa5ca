"""`lake serve` against one request that tries to take it down or read past its token (issue 26 items 2-5).

Before: a 366-byte YAML alias bomb in a SKILL.md's front matter made the server abort at 3.4 GB and
`lake watch` commit a 302 MB row; with --token, GET /latest_example (and every other read) answered anyone;
an Idempotency-Key reused with another body answered `duplicate` and dropped the new body. Now: the bomb is a
422 / an ingest error costing kilobytes, every route but /v1/health needs the token, and a reused key with
another body is a 409 with nothing written. The HTTP limits (header size, idle and slow connections, the
connection cap) are in test_server_limits.py.
"""
import time
import tracemalloc

import httpx
import pytest

from ingest.watch import Watcher
from lake import Lake
from lake.skill_files import SkillFileError, parse_frontmatter, read_skill_file
from tests.ingest_helpers import ServerProcess
from tests.lake_helpers import scalar

TOKEN = "hardening-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GROUP = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [1.0, 0.0]}
REG = {"wandb_group": "", "wandb_project": "", "batch_size": 2, "max_token_len": 64, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 0, "num_steps": 1}
# 9 levels of 9 aliases: 387 million strings once expanded, from 366 bytes
BOMB = ("---\nname: bomb\n"
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
        + "---\nbody\n")


def _rss_peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hardening")
    lk = Lake.init(tmp / "lake")
    lk.append("trajectories", [{"trajectory_id": "seed", "messages": [{"role": "user", "content": "s"}]}])
    with ServerProcess(tmp / "lake", token=TOKEN, log_path=tmp / "serve.log") as srv:
        yield srv, tmp / "lake", httpx.Client(base_url=srv.url, timeout=30, headers=AUTH)


# -- item 2: the YAML alias bomb ------------------------------------------------------------------------------
def test_the_bomb_is_small_text():
    assert len(BOMB.encode()) < 400


@pytest.mark.attack
def test_alias_bomb_is_refused_before_it_expands():
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(SkillFileError, match="alias bomb") as err:
            read_skill_file(BOMB.encode(), "bomb/SKILL.md")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.kind == "yaml_alias_bomb" and err.value.line is not None
    assert peak < 5 << 20, peak  # kilobytes: the bound is counted on the composed graph, nothing is copied
    assert time.perf_counter() - t0 < 2


@pytest.mark.attack
@pytest.mark.parametrize("fm", ["a: &a [*a]", "a: &a {x: [1, *a]}", "k: &k\n  - &j [*k]"])
def test_a_front_matter_that_contains_itself_is_refused(fm):
    with pytest.raises(SkillFileError, match="contains itself"):
        parse_frontmatter("\n" + fm + "\n", "x/SKILL.md")


def test_bounded_aliases_and_merge_keys_still_read():
    fm, warning = parse_frontmatter("\nname: x\nbase: &b {k: 1, tags: [a, b]}\nm:\n  <<: *b\n  j: 2\nagain: *b\n")
    assert warning is None
    assert fm["m"] == {"k": 1, "tags": ["a", "b"], "j": 2} and fm["again"] == {"k": 1, "tags": ["a", "b"]}


@pytest.mark.attack
def test_alias_bomb_posted_is_a_422_and_the_server_stays_small(server):
    srv, root, c = server
    t0 = time.perf_counter()
    r = c.post("/v1/skills", json={"content": BOMB})
    assert r.status_code == 422 and "alias bomb" in r.text, r.text
    assert time.perf_counter() - t0 < 5
    assert c.get("/v1/health").status_code == 200
    assert _rss_peak_mb(srv.proc.pid) < 1024  # before: 3.4 GB, then bad_alloc
    assert scalar(root, "SELECT count(*) FROM skills WHERE name = 'bomb'") == 0


@pytest.mark.attack
def test_alias_bomb_in_a_watched_folder_is_an_ingest_error(tmp_path):
    skills = tmp_path / "skills"
    (skills / "bomb").mkdir(parents=True)
    (skills / "bomb" / "SKILL.md").write_text(BOMB)
    (skills / "fine").mkdir()
    (skills / "fine" / "SKILL.md").write_text("---\nname: fine\ndescription: d\n---\nbody\n")
    lk = Lake.init(tmp_path / "lake")
    tracemalloc.start()
    try:
        Watcher(lk, skills_dir=skills, settle=0).scan()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20, peak  # before: 3.8 GB and a 302 MB row
    with lk.snapshot() as snap:
        assert snap.sql("SELECT name FROM skills").fetchall() == [("fine",)]
        reason = snap.sql("SELECT reason FROM ingest_errors").fetchall()
    assert len(reason) == 1 and "alias bomb" in reason[0][0], reason


# -- item 4: the token guards reads too ------------------------------------------------------------------------
@pytest.mark.attack
@pytest.mark.parametrize("path", ["/latest_example", "/status", "/info", "/wandb_info", "/v1/stats", "/",
                                  "/openapi.json", "/docs"])
def test_with_a_token_anonymous_reads_are_refused(server, path):
    srv, _, c = server
    assert c.post("/register", json=REG).status_code == 200
    secret = dict(GROUP, tokens=[[7, 7, 7], [1, 2, 4]])
    assert c.post("/scored_data", json=secret).status_code == 200
    assert c.get("/latest_example").json()["tokens"][0] == [7, 7, 7]
    anon = httpx.get(srv.url + path, timeout=10)
    assert anon.status_code in (401, 404), (path, anon.status_code, anon.text[:200])
    assert b"[7,7,7]" not in anon.content and b"AtroposLib" not in anon.content and b"openapi" not in anon.content
    wrong = httpx.get(srv.url + path, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code in (401, 404)
    assert httpx.get(srv.url + "/v1/health", timeout=10).status_code == 200  # the one open route


def test_latest_example_with_the_token_answers(server):
    _, _, c = server
    c.post("/register", json=REG)
    assert c.post("/scored_data", json=dict(GROUP, tokens=[[9, 9, 9], [1, 2, 4]])).status_code == 200
    assert c.get("/latest_example").json()["tokens"][0] == [9, 9, 9]


# -- item 5: one Idempotency-Key, one body ----------------------------------------------------------------------
@pytest.mark.attack
def test_scored_data_list_key_reused_with_another_body_is_a_409(server):
    _, root, c = server
    key = {"Idempotency-Key": "list-reuse"}
    first = c.post("/scored_data_list", json=[GROUP], headers=key)
    assert first.json()["groups_processed"] == 1
    other = dict(GROUP, scores=[0.5, 0.25])
    r = c.post("/scored_data_list", json=[other, GROUP], headers=key)
    assert r.status_code == 409 and r.json()["type"] == "idempotency_conflict", r.text
    again = c.post("/scored_data_list", json=[GROUP], headers=key)  # the true retry is still a duplicate
    assert again.status_code == 200
    gid = "json_extract_string(metadata, '$.idempotency_key') = 'list-reuse'"
    assert scalar(root, f"SELECT count(DISTINCT group_id) FROM trajectories WHERE {gid}") == 1


@pytest.mark.attack
@pytest.mark.parametrize("route", ["/scored_data", "/v1/trajectories", "/v1/rewards", "/v1/skills"])
def test_a_key_reused_with_another_body_is_a_409_on_every_route(server, route):
    _, root, c = server
    key = {"Idempotency-Key": f"reuse-{route}"}
    first, second = {
        "/scored_data": (GROUP, dict(GROUP, scores=[0.0, 1.0])),
        "/v1/trajectories": ([{"messages": [{"role": "user", "content": "one"}]}],
                             [{"messages": [{"role": "user", "content": "two"}]}]),
        "/v1/rewards": ({"trajectory_id": "seed", "reward": 1.0}, {"trajectory_id": "seed", "reward": 0.0}),
        "/v1/skills": ({"content": "---\nname: reuse\ndescription: d\n---\none\n"},
                       {"content": "---\nname: reuse\ndescription: d\n---\ntwo\n"}),
    }[route]
    r1 = c.post(route, json=first, headers=key)
    assert r1.status_code == 200 and not r1.json().get("duplicate"), r1.text
    r2 = c.post(route, json=second, headers=key)
    assert r2.status_code == 409, r2.text
    r3 = c.post(route, json=first, headers=key)  # the honest retry: a duplicate, not a conflict
    assert r3.status_code == 200 and (r3.json().get("duplicate") or r3.json().get("duplicates")), r3.text
    table = {"/v1/rewards": "rewards", "/v1/skills": "skills"}.get(route, "trajectories")
    assert scalar(root, f"SELECT count(*) FROM {table} WHERE "
                        f"json_extract_string(metadata, '$.idempotency_key') = 'reuse-{route}'") == (
        2 if route == "/scored_data" else 1)  # a group of 2 sequences is 2 rows


@pytest.mark.attack
def test_a_reused_key_is_refused_by_a_server_that_did_not_see_it(server, tmp_path):
    """The body hash is in the rows, not only in memory: a second server on the lake (as a restarted one)
    still refuses the other body, and takes the same body as the duplicate it is."""
    srv, root, c = server
    key = {"Idempotency-Key": "other-server"}
    assert c.post("/scored_data", json=GROUP, headers=key).status_code == 200
    with ServerProcess(root, token=TOKEN, log_path=tmp_path / "s.log") as other:
        o = httpx.Client(base_url=other.url, timeout=30, headers=AUTH)
        assert o.post("/scored_data", json=dict(GROUP, scores=[0.0, 0.0]), headers=key).status_code == 409
        r = o.post("/scored_data", json=GROUP, headers=key)
        assert r.status_code == 200 and r.json().get("duplicate") is True
    assert scalar(root, "SELECT count(*) FROM trajectories WHERE "
                        "json_extract_string(metadata, '$.idempotency_key') = 'other-server'") == 2


# -- issue 38 item 10: a skill's front matter bounded before it is parsed, off the event loop ------------------------
def _skill_with_keys(n: int) -> str:
    return "---\nname: many\n" + "".join(f"k{i}: v\n" for i in range(n)) + "---\nbody\n"


@pytest.mark.attack
@pytest.mark.parametrize("content, words", [
    (_skill_with_keys(100_000), "bytes"),  # ~1 MB: the red team's 100k plain keys
    (_skill_with_keys(3_000), "lines and commas"),  # within the byte bound, beyond the item bound
    ("---\nname: many\nk: [" + ",".join(["1"] * 5000) + "]\n---\nbody\n", "lines and commas"),  # flow style
])
def test_a_skill_with_too_many_keys_is_a_422_at_once_for_the_right_reason(server, content, words):
    """Refused before YAML composes it (100k keys took 5.2 s on the event loop and was called an alias bomb),
    and health answers meanwhile."""
    _, _, c = server
    t0 = time.perf_counter()
    r = c.post("/v1/skills", json={"content": content})
    took = time.perf_counter() - t0
    assert r.status_code == 422, r.text
    assert words in r.text and "alias bomb" not in r.text and "frontmatter_too_large" in r.text, r.text
    # deadlines, not latencies: refused before parsing (ms; parsing took 5.2 s), health never behind it
    assert took < 4.0, took
    assert _health_while(c, lambda: c.post("/v1/skills", json={"content": content})) < 2.5


def _health_while(c, work) -> float:
    """The slowest /v1/health answer while `work` runs in another thread."""
    import threading

    done = threading.Event()
    t = threading.Thread(target=lambda: (work(), done.set()))
    t.start()
    worst = 0.0
    while not done.is_set():
        t0 = time.perf_counter()
        assert c.get("/v1/health").status_code == 200
        worst = max(worst, time.perf_counter() - t0)
    t.join()
    return worst


def test_a_front_matter_of_a_few_dozen_keys_still_reads():
    fm, warning = parse_frontmatter("name: ok\n" + "".join(f"k{i}: v, w\n" for i in range(60)))
    assert warning is None and fm["name"] == "ok" and fm["k59"] == "v, w"
