"""Bad-input corpus: every case gets a clear 4xx (HTTP) or a rejected file with its reason (watcher); no row
is written, and the server and the watcher keep running. One server and one watcher serve the module; each
test checks only what it did itself, so the tests pass in any order and alone."""
import gzip
import json
import os
import random
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.ingest_helpers import ServerProcess, WatchProcess
from lake import Lake

GOOD = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [1.0, 0.0]}
REG = {"wandb_group": "", "wandb_project": "", "batch_size": 4, "max_token_len": 64, "checkpoint_dir": "c",
       "save_checkpoint_interval": 1, "starting_step": 0, "num_steps": 1}
SEED_ID = "seeded-1"
SKILL_OK = "---\nname: fine\ndescription: d\n---\nbody\n"


def g(**kw):
    d = json.loads(json.dumps(GOOD))
    d.update(kw)
    return d


def j(obj):
    return json.dumps(obj).encode()


GZ = {"Content-Encoding": "gzip"}
JSON = {"Content-Type": "application/json"}
# (id, method, path, body bytes, extra headers, expected status, text expected in the answer)
HTTP_CASES = [
    ("malformed-json", "POST", "/scored_data", b'{"tokens": [[1,2]', {}, 422, "json_invalid"),
    ("missing-scores", "POST", "/scored_data", j({"tokens": [[1]], "masks": [[1]]}), {}, 422, '"scores"'),
    ("missing-tokens", "POST", "/scored_data", j({"masks": [[1]], "scores": [1]}), {}, 422, '"tokens"'),
    ("float-tokens", "POST", "/scored_data", j(g(tokens=[[1.5, 2], [1, 2]])), {}, 422, "int"),
    ("string-tokens", "POST", "/scored_data", j(g(tokens="abc")), {}, 422, "list"),
    ("string-scores", "POST", "/scored_data", j(g(scores=["high", "low"])), {}, 422, "scores"),
    ("message-no-role", "POST", "/scored_data", j(g(messages=[[{"content": "x"}], [{"content": "y"}]])), {}, 422,
     "role"),
    ("message-no-content", "POST", "/scored_data", j(g(messages=[[{"role": "user"}], [{"role": "user"}]])), {}, 422,
     "content"),
    ("token-beyond-int64", "POST", "/scored_data", b'{"tokens":[[1,%d]],"masks":[[1,2]],"scores":[1]}' % (2 ** 70), {},
     422, "range"),
    ("native-token-beyond-int64", "POST", "/v1/trajectories",
     b'{"trajectory_id":"x0","messages":[],"tokens":[%d]}' % (2 ** 70), {}, 422, "tokens"),
    ("infinite-token", "POST", "/scored_data", b'{"tokens":[[1,1e999]],"masks":[[1,2]],"scores":[1]}', {}, 422,
     "tokens"),
    ("group-is-list", "POST", "/scored_data", j([GOOD]), {}, 422, "model_type"),
    ("empty-group", "POST", "/scored_data", j(g(tokens=[], masks=[], scores=[])), {}, 422, "at least one"),
    ("env-id-string", "POST", "/scored_data", j(g(env_id="zero")), {}, 422, "env_id"),
    ("list-one-bad", "POST", "/scored_data_list", j([GOOD, {"tokens": [[1]], "masks": [[1]]}]), {}, 422,
     '[\"body\",1,\"scores\"]'),
    ("list-not-list", "POST", "/scored_data_list", j(GOOD), {}, 422, "list"),
    ("bad-gzip", "POST", "/scored_data", b"this is not gzip", GZ, 400, "Invalid gzip payload"),
    ("truncated-gzip", "POST", "/scored_data", gzip.compress(j(GOOD))[:-8], GZ, 400, "Invalid gzip payload"),
    ("gzip-bomb", "POST", "/scored_data", gzip.compress(b"[" + b" " * (4 << 20) + b"]"), GZ, 413, "limit"),
    ("oversized", "POST", "/v1/trajectories", b"[" + b" " * (700 << 10) + b"]", {}, 413, "limit"),
    ("oversized-declared", "POST", "/scored_data", b"{}", {"Content-Length-Override": "1"}, 413, "limit"),
    ("non-utf8", "POST", "/scored_data", b'{"tokens": "\xff\xfe"}', {}, 422, "UTF-8"),
    ("empty-body", "POST", "/scored_data", b"", {}, 422, "required"),
    ("register-missing", "POST", "/register", j({"batch_size": 4}), {}, 422, "wandb_group"),
    ("register-bad-type", "POST", "/register", j(dict(REG, batch_size="four")), {}, 422, "batch_size"),
    ("register-env-bad-weight", "POST", "/register-env",
     j({"max_token_length": 8, "desired_name": "e", "weight": "heavy", "group_size": 2}), {}, 422, "weight"),
    ("register-env-bad-min", "POST", "/register-env",
     j({"max_token_length": 8, "desired_name": "e", "weight": 1, "group_size": 2, "min_batch_allocation": 2.0}), {},
     422, "min_batch_allocation"),
    ("status-env-bad-id", "GET", "/status-env?env_id=x", b"", {}, 422, "env_id"),
    ("status-env-unknown", "GET", "/status-env?env_id=99", b"", {}, 404, "unknown env_id"),
    ("disconnect-missing", "POST", "/disconnect-env", j({}), {}, 422, "env_id"),
    ("native-malformed", "POST", "/v1/trajectories", b'{"trajectory_id": ', {}, 422, "JSON"),
    ("native-no-messages", "POST", "/v1/trajectories", j({"trajectory_id": "x1"}), {}, 422, "messages"),
    ("native-messages-not-list", "POST", "/v1/trajectories", j({"trajectory_id": "x2", "messages": "hi"}), {}, 422,
     "messages"),
    ("native-reward-string", "POST", "/v1/trajectories",
     j({"trajectory_id": "x3", "messages": [], "reward": "high"}), {}, 422, "reward"),
    ("native-tokens-strings", "POST", "/v1/trajectories",
     j({"trajectory_id": "x4", "messages": [], "tokens": ["a"]}), {}, 422, "tokens"),
    ("native-content-number", "POST", "/v1/trajectories",
     j({"trajectory_id": "x5", "messages": [{"role": "user", "content": 5}]}), {}, 422, "content"),
    ("ndjson-bad-line-2", "POST", "/v1/trajectories",
     j({"trajectory_id": "x6", "messages": []}) + b"\n{oops\n", {"Content-Type": "application/x-ndjson"}, 422,
     "JSON"),
    ("array-one-bad", "POST", "/v1/trajectories",
     j([{"trajectory_id": "x7", "messages": []}, {"trajectory_id": "x8", "messages": [{"content": "no role"}]}]), {},
     422, "role"),
    ("unknown-format", "POST", "/v1/trajectories", j({"foo": 1}), {}, 422, "unknown record format"),
    ("hermes-bad-role", "POST", "/v1/trajectories", j({"conversations": [{"from": "robot", "value": "x"}]}), {}, 422,
     "unknown turn role"),
    ("binary-body", "POST", "/v1/trajectories", b"\x00\x01\x02\x03binary", {}, 400, "binary"),
    ("empty-trajectory-id", "POST", "/v1/trajectories", j({"trajectory_id": " ", "messages": []}), {}, 422,
     "trajectory_id"),
    ("unsupported-encoding", "POST", "/v1/trajectories", j({"trajectory_id": "x9", "messages": []}),
     {"Content-Encoding": "br"}, 415, "Content-Encoding"),
    ("reward-unknown-id", "POST", "/v1/rewards", j({"trajectory_id": "nope", "reward": 1}), {}, 404, "unknown"),
    ("reward-missing-id", "POST", "/v1/rewards", j({"reward": 1}), {}, 422, "trajectory_id"),
    ("reward-bad-type", "POST", "/v1/rewards", j({"trajectory_id": SEED_ID, "reward": "good"}), {}, 422, "reward"),
    ("skill-path-traversal", "POST", "/v1/skills", j({"name": "../../etc/passwd", "body": "x"}), {}, 422,
     "not allowed"),
    ("skill-category-traversal", "POST", "/v1/skills", j({"content": SKILL_OK, "category": "../up"}), {}, 422,
     "category"),
    ("skill-frontmatter-no-name", "POST", "/v1/skills", j({"content": "---\ndescription: d\n---\nbody\n"}), {}, 422,
     "no 'name'"),
    ("skill-name-traversal-in-frontmatter", "POST", "/v1/skills",
     j({"content": "---\nname: ../../x\n---\nbody\n"}), {}, 422, "not allowed"),
    ("skill-no-frontmatter", "POST", "/v1/skills", j({"content": "# just markdown\n"}), {}, 422, "frontmatter"),
    ("skill-binary", "POST", "/v1/skills", j({"content": "---\nname: b\n---\n\x00\x01"}), {}, 422, "binary"),
]

DEEP = {"leaf": 1}
for _ in range(300):  # valid JSON (orjson reads 1024 levels) that JSON storage refuses (254 levels)
    DEEP = {"x": DEEP}
DEEP_YAML = "---\nname: deepfm\ndescription: d\nx: " + "[" * 300 + "]" * 300 + "\n---\nbody\n"
# issue 11 item 9: valid JSON the lake cannot store answered 500 (five cases); now a 422 naming the field
ATTACK_HTTP_CASES = [
    ("deep-native-metadata", "POST", "/v1/trajectories", j({"trajectory_id": "deep0", "messages": [],
                                                            "metadata": DEEP}), {}, 422, "254 levels"),
    ("deep-native-unknown-key", "POST", "/v1/trajectories", j({"trajectory_id": "deep1", "messages": [],
                                                               "extra": DEEP}), {}, 422, "extra"),
    ("deep-native-no-id", "POST", "/v1/trajectories", j({"messages": [], "metadata": DEEP}), {}, 422, "254 levels"),
    ("deep-hermes", "POST", "/v1/trajectories", j({"conversations": [{"from": "human", "value": "deep"}],
                                                   "metadata": DEEP}), {}, 422, "254 levels"),
    ("occurred-at-1e20", "POST", "/v1/trajectories", j({"trajectory_id": "occ0", "messages": [],
                                                        "occurred_at": 1e20}), {}, 422, "out of range"),
    ("deep-reward-labels", "POST", "/v1/rewards", j({"trajectory_id": SEED_ID, "reward": 1, "labels": DEEP}), {},
     422, "254 levels"),
    ("reward-occurred-at-1e20", "POST", "/v1/rewards", j({"trajectory_id": SEED_ID, "reward": 1,
                                                          "occurred_at": 1e20}), {}, 422, "out of range"),
    ("deep-skill-record", "POST", "/v1/skills", j({"name": "deeprec", "body": "x", "frontmatter": DEEP}), {}, 422,
     "254 levels"),
    ("deep-skill-frontmatter", "POST", "/v1/skills", j({"content": DEEP_YAML}), {}, 422, "levels deep"),
    ("skill-occurred-at-1e20", "POST", "/v1/skills", j({"name": "occ", "body": "x", "occurred_at": 1e20}), {}, 422,
     "out of range"),
    ("deep-group-extra", "POST", "/scored_data", j(g(extra=DEEP)), {}, 422, "Recursion"),
    ("deep-group-list", "POST", "/scored_data_list", j([GOOD, g(overrides=[DEEP, {}])]), {}, 422, "Recursion"),
]
# Hardening IV item 3: a tool call nested 5,000 deep in a message (10 KB, within every body bound) was a
# RecursionError and a plain 500; now a 422 naming the field and the bound
DEEP_CALL = '<tool_call>{"name": "run", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>"
DEEP_ARGS = "[" * 5000 + "]" * 5000
USER = {"role": "user", "content": "list the files"}
ATTACK_HTTP_CASES += [
    ("deep-call-native-content", "POST", "/v1/trajectories",
     j({"trajectory_id": "dc0", "messages": [USER, {"role": "assistant", "content": DEEP_CALL}]}), {}, 422,
     "nested deeper than 64 levels"),
    ("deep-call-native-arguments", "POST", "/v1/trajectories",
     j({"trajectory_id": "dc1", "messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c", "type": "function", "function": {"name": "run", "arguments": DEEP_ARGS}}]}]}), {}, 422,
     '"messages",1,"tool_calls",0,"function","arguments"'),
    ("deep-call-ndjson-line-2", "POST", "/v1/trajectories",
     j({"trajectory_id": "dc2", "messages": [USER]}) + b"\n"
     + j({"trajectory_id": "dc3", "messages": [USER, {"role": "assistant", "content": DEEP_CALL}]}) + b"\n",
     {"Content-Type": "application/x-ndjson"}, 422, "nested deeper than 64 levels"),
    ("deep-call-hermes", "POST", "/v1/trajectories",
     j({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": DEEP_CALL}]}), {}, 422,
     "nested deeper than 64 levels"),
]
HTTP_PARAMS = ([pytest.param(c, id=c[0]) for c in HTTP_CASES]
               + [pytest.param(c, id=c[0], marks=pytest.mark.attack) for c in ATTACK_HTTP_CASES])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    lk = Lake.init(tmp / "lake")
    lk.append("trajectories", [{"trajectory_id": SEED_ID, "messages": [{"role": "user", "content": "seed"}]}])
    srv = ServerProcess(tmp / "lake", extra=["--max-body-mb", "0.5", "--max-inflated-mb", "2"],
                        log_path=tmp / "serve.log").start()
    c = httpx.Client(base_url=srv.url, timeout=30)
    c.post("/register", json=REG)
    c.get("/batch")
    c.post("/register-env", json={"max_token_length": 64, "desired_name": "e", "weight": 1.0, "group_size": 2})
    inbox, skills = tmp / "inbox", tmp / "skills"
    inbox.mkdir()
    skills.mkdir()
    wp = WatchProcess(tmp / "lake", inbox=inbox, skills=skills, settle=0.2, interval=0.3,
                      extra=["--max-file-mb", "8"]).start()
    yield {"tmp": tmp, "srv": srv, "c": c, "inbox": inbox, "skills": skills, "wp": wp}
    srv.kill()
    wp.stop()


def _counts(env) -> dict:
    """Rows per table: what a rejected request must leave unchanged."""
    with Lake(env["tmp"] / "lake").snapshot() as snap:
        return {t: snap.sql(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("trajectories", "rewards", "skills", "runs")}


def _raw_post(port: int, path: str, declared: int) -> str:
    """Declare a body of `declared` bytes and send none of it: the answer must come from the header alone."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {declared}\r\n\r\n".encode())
        answer = ""
        while "limit" not in answer:
            chunk = sock.recv(65536).decode("latin-1")
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize("case", HTTP_PARAMS)
def test_http_bad_input(env, case):
    _, method, path, body, headers, status, text = case
    headers = {"Content-Type": "application/json", **headers}  # what every real client sends (else a 415)
    before = _counts(env)
    if headers.pop("Content-Length-Override", None):
        answer = _raw_post(env["srv"].port, path, 900 << 20)
        assert answer.startswith(f"HTTP/1.1 {status}"), answer
        assert text in answer
    else:
        r = env["c"].request(method, path, content=body, headers=headers)
        assert r.status_code == status, r.text
        assert text in r.text, r.text
    assert env["srv"].alive()
    assert _counts(env) == before


def _rand_bytes(n, seed=5):
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n)) + b"\x00"


HERMES = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
FILE_CASES = [
    ("malformed.jsonl", (j(HERMES) + b"\n") * 2 + b'{"conversations": [\n', "line: 3", "malformed JSON"),
    ("binary.jsonl", _rand_bytes(300), "line", "binary"),
    ("truncated.jsonl.gz", gzip.compress((j(HERMES) + b"\n") * 50)[:-20], "line", "truncated"),
    ("corrupt.jsonl.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + b"garbage-not-deflate" * 5, "line", "gzip"),
    ("nonutf8.jsonl", j(HERMES) + b"\n" + b'{"conversations": "\xff\xfe"}\n', "line: 2", "UTF-8"),
    ("atropos-no-masks.jsonl", j({"tokens": [[1]], "scores": [1.0]}) + b"\n", "line: 1", "masks"),
    ("hermes-bad-role.jsonl", j({"conversations": [{"from": "alien", "value": "x"}]}) + b"\n", "line: 1",
     "unknown turn role"),
    ("empty.jsonl", b"\n\n", "reason", "no records"),
    ("mixed.jsonl", j(HERMES) + b"\n" + j(GOOD) + b"\n", "line: 2", "differs"),
    ("native-bad-reward.jsonl", j({"trajectory_id": "f0", "messages": []}) + b"\n"
     + j({"trajectory_id": "f1", "messages": [], "reward": "high"}) + b"\n", "line: 2\nfield: reward", "reward"),
    ("unknown-format.jsonl", j({"hello": "world"}) + b"\n", "line: 1", "unknown record format"),
    ("bomb.jsonl.gz", gzip.compress(b"\0" * (20 << 20)), "line: 1", "longer than"),
    ("big.jsonl", (j(HERMES) + b"\n") * 1 + b"[" + b" " * (9 << 20) + b"]\n", "line: 2", "longer than"),
    ("deep.jsonl", j(HERMES) + b"\n" + j(dict(HERMES, metadata=DEEP)) + b"\n", "line: 2", "254 levels"),
    ("occurred.jsonl", j({"trajectory_id": "f2", "messages": [], "occurred_at": 1e20}) + b"\n", "line: 1",
     "out of range"),
]
SKILL_CASES = [  # a missing name or non-YAML front matter is read as Hermes does: tests/test_skill_files.py
    ("traversal/SKILL.md", b"---\nname: ../../../etc/passwd\ndescription: x\n---\nbody\n", "not allowed"),
    ("nofm/SKILL.md", b"# Title only\nno frontmatter\n", "does not start"),
    ("binary/SKILL.md", _rand_bytes(200, 9), "binary"),
    ("latin1/SKILL.md", b"---\nname: caf\xe9\n---\nbody\n", "UTF-8"),
    ("emptybody/SKILL.md", b"---\nname: emptybody\ndescription: d\n---\n\n", "empty body"),
    ("deepfm/SKILL.md", DEEP_YAML.encode(), "levels deep"),
]


def test_files_and_skills_rejected_with_reasons(env):
    inbox, skills = env["inbox"], env["skills"]
    before = _counts(env)
    for name, data, _, _ in FILE_CASES:
        tmp = inbox / f".{name}.part"
        tmp.write_bytes(data)
        os.replace(tmp, inbox / name)
    (inbox / "notes.txt").write_bytes(b"just some notes\n")  # not a trajectory file: left alone
    for rel, data, _ in SKILL_CASES:
        p = skills / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (skills / ".usage.json").write_text("{not json")
    rejected = inbox / ".rejected"
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        done = rejected.is_dir() and all((rejected / f"{n}.error.txt").exists() for n, *_ in FILE_CASES)
        with Lake(env["tmp"] / "lake").snapshot() as snap:
            nerr = snap.sql("SELECT count(*) FROM ingest_errors WHERE source_path LIKE '%SKILL.md' "
                            "OR source_path LIKE '%.usage.json'").fetchall()[0][0]
        if done and nerr >= len(SKILL_CASES) + 1:
            break
        time.sleep(0.2)
    for name, _, where, why in FILE_CASES:
        assert (rejected / name).exists(), name
        err = (rejected / f"{name}.error.txt").read_text()
        assert where in err and why in err, (name, err)
    assert (inbox / "notes.txt").read_bytes() == b"just some notes\n" and not (rejected / "notes.txt").exists()
    with Lake(env["tmp"] / "lake").snapshot() as snap:
        errs = snap.arrow("SELECT reason, source_path FROM ingest_errors").to_pylist()
        skill_names = {r[0] for r in snap.sql("SELECT name FROM skills").fetchall()}
    by_path = {}
    for e in errs:
        by_path.setdefault(Path(e["source_path"]).name if not e["source_path"].endswith("SKILL.md")
                           else str(Path(e["source_path"]).parent.name) + "/SKILL.md", []).append(e["reason"])
    for rel, _, why in SKILL_CASES:
        assert any(why in r for r in by_path.get(rel, [])), (rel, by_path.get(rel))
    assert any("not valid JSON" in r for r in by_path.get(".usage.json", []))
    assert all(any(f"{n}" == Path(e["source_path"]).name for e in errs) for n, *_ in FILE_CASES)
    assert not skill_names & {"emptybody", "nofm", "binary", "latin1", "traversal", "deepfm"}
    after = _counts(env)
    assert after["trajectories"] == before["trajectories"] and after["skills"] == before["skills"]
    assert env["wp"].alive() and env["srv"].alive()


def test_still_serving_after_bad_input(env):
    """After bad input of every kind, both processes still do their job (good input is written)."""
    c = env["c"]
    assert c.post("/scored_data", content=b'{"tokens": [[1,2]', headers=JSON).status_code == 422
    (env["inbox"] / "still-bad.jsonl").write_bytes(b"{oops\n")
    before = _counts(env)
    assert c.post("/scored_data", json=GOOD).json() == {"status": "received"}
    good = {"conversations": [{"from": "human", "value": "still serving?"}, {"from": "gpt", "value": "yes"}]}
    (env["inbox"] / "good.jsonl").write_bytes(j(good) + b"\n")
    (env["skills"] / "still-serving").mkdir()
    (env["skills"] / "still-serving" / "SKILL.md").write_text(SKILL_OK.replace("name: fine", "name: still-serving"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with Lake(env["tmp"] / "lake").snapshot() as snap:
            skill = snap.sql("SELECT count(*) FROM skills WHERE name = 'still-serving'").fetchall()[0][0]
        if skill and (env["inbox"] / ".done" / "good.jsonl").exists():
            break
        time.sleep(0.1)
    assert (env["inbox"] / ".done" / "good.jsonl").exists()
    assert (env["inbox"] / ".rejected" / "still-bad.jsonl").exists()
    assert skill == 1
    assert _counts(env)["trajectories"] == before["trajectories"] + 2 + 1


def _mutate(rng, obj, depth=0):
    """A random structural mutation of a JSON value (type swaps, drops, odd numbers, deep nesting)."""
    choices = [None, True, -1, 2 ** 63, 1.5, float("1e308"), "", "x" * 50, [], {}, [[[]]], {"role": 1}]
    if isinstance(obj, dict) and obj and rng.random() < 0.7:
        k = rng.choice(list(obj))
        out = dict(obj)
        r = rng.random()
        if r < 0.3:
            out.pop(k)
        elif r < 0.7:
            out[k] = _mutate(rng, obj[k], depth + 1) if depth < 4 else rng.choice(choices)
        else:
            out[k] = rng.choice(choices)
        return out
    if isinstance(obj, list) and obj and rng.random() < 0.7:
        i = rng.randrange(len(obj))
        out = list(obj)
        out[i] = _mutate(rng, obj[i], depth + 1) if depth < 4 else rng.choice(choices)
        return out
    return rng.choice(choices)


def test_fuzz_no_5xx(env):
    """Seeded random mutations of valid requests: every answer is 2xx or 4xx, never 5xx."""
    rng = random.Random(2026)
    c = env["c"]
    valid = [
        ("/scored_data", g(messages=[[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                           inference_logprobs=[[1.0, -0.1, -0.2]] * 2, overrides=[{}, {}])),
        ("/scored_data_list", [GOOD, GOOD]),
        ("/v1/trajectories", {"trajectory_id": "fz", "messages": [{"role": "user", "content": "x"},
                              {"role": "assistant", "content": None, "tool_calls": [
                                  {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
                              "reward": 1.0, "steps": [{"observation": "o", "action": "a", "reward": 0.0}]}),
        ("/v1/trajectories", HERMES),
        ("/v1/rewards", {"trajectory_id": SEED_ID, "reward": 0.5, "labels": {"k": 1}}),
        ("/v1/skills", {"content": SKILL_OK, "category": "cat"}),
        ("/register-env", {"max_token_length": 8, "desired_name": "e", "weight": 1.0, "group_size": 2}),
        ("/disconnect-env", {"env_id": 5}),
    ]
    seen = {}
    for k in range(int(os.environ.get("FUZZ_N", "160"))):
        path, body = valid[k % len(valid)]
        mutated = _mutate(rng, body)
        data = json.dumps(mutated, allow_nan=True).encode()
        headers = {"Content-Type": "application/json"}
        if k % 16 >= 8:  # every other round sends an Idempotency-Key from a small pool: keys get reused
            headers["Idempotency-Key"] = f"fuzz-{path}-{rng.randrange(3)}"
        r = c.post(path, content=data, headers=headers, timeout=10)  # a claim left behind would hang here
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500, (path, data[:300], r.text[:300])
    assert env["srv"].alive()
    assert any(code >= 400 for code in seen) and any(code < 300 for code in seen), seen


def test_list_with_a_bad_later_group_claims_nothing(env):
    """Defect 11: /scored_data_list with an Idempotency-Key and an out-of-range token in a later group was a
    500 that kept the earlier groups' claims, so every retry with that key hung. Now: a 422 naming the group,
    nothing written, and the retry with the same key is served (then acknowledged as a duplicate)."""
    c = env["c"]
    key = {"Idempotency-Key": "defect-11"}
    bad = g(tokens=[[1, 2 ** 63], [1, 2]])
    before = _counts(env)
    key = {**key, **JSON}
    r = c.post("/scored_data_list", content=j([GOOD, bad]), headers=key, timeout=10)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", 1], r.text
    assert _counts(env) == before
    r = c.post("/scored_data_list", content=j([GOOD, GOOD]), headers=key, timeout=10)
    assert r.status_code == 200 and r.json()["groups_processed"] == 2, r.text
    assert _counts(env)["trajectories"] == before["trajectories"] + 4
    r = c.post("/scored_data_list", content=j([GOOD, GOOD]), headers=key, timeout=10)
    assert r.status_code == 200 and _counts(env)["trajectories"] == before["trajectories"] + 4


@pytest.mark.attack
@pytest.mark.parametrize("path", ["/scored_data", "/scored_data_list"])
def test_a_deep_call_in_atropos_messages_is_kept_raw_not_a_500(env, path):
    """Atropos groups take any messages (run-api does): one that cannot be read, as this call nested 5,000 deep
    (a RecursionError and a 500 before), is left out of the `messages` column and kept in `raw`, as every
    unreadable message is; the group is served as it came."""
    c = env["c"]
    group = g(messages=[[USER, {"role": "assistant", "content": DEEP_CALL}], [USER]])
    before = _counts(env)
    r = c.post(path, content=j(group if path == "/scored_data" else [group]), headers=JSON)
    assert r.status_code == 200, r.text
    assert env["srv"].alive() and c.get("/v1/health").status_code == 200
    assert _counts(env)["trajectories"] == before["trajectories"] + 2
    with Lake(env["tmp"] / "lake").snapshot() as snap:
        rows = snap.sql("SELECT len(messages), raw FROM trajectories WHERE raw LIKE '%<tool_call>%' "
                        "AND raw LIKE '%[[[[[%'").fetchall()
    assert rows and all(n == 0 for n, _ in rows)
