"""`lake import`: the real CLI as a subprocess, all formats, --json summary, idempotent re-import."""
import gzip
import json
import random
import subprocess
import sys

from lake import Lake

LAKE = [sys.executable, "-c", "from lachesis.cli import main; main()"]


def run(*args):
    return subprocess.run(LAKE + list(args), capture_output=True, text=True, timeout=120)


def hermes(i):
    return {"prompt_index": i, "conversations": [
        {"from": "system", "value": "tools <tools>\n[]\n</tools>"},
        {"from": "human", "value": f"task {i}"},
        {"from": "gpt", "value": f"<think>\nplan {i}\n</think>\n<tool_call>\n{{\"name\": \"terminal\", "
                                 f"\"arguments\": {{\"command\": \"ls {i}\"}}}}\n</tool_call>"},
        {"from": "tool", "value": "<tool_response>\n{\"tool_call_id\": \"call_0\", \"name\": \"terminal\", "
                                  "\"content\": \"a b\"}\n</tool_response>"},
        {"from": "gpt", "value": "<think>\n</think>\ndone"}],
        "metadata": {"batch_num": 0, "timestamp": "2026-05-02T10:00:00", "model": "hermes-3"},
        "completed": True, "partial": False, "api_calls": 2, "toolsets_used": ["terminal"],
        "tool_stats": {}, "tool_error_counts": {}}


def test_import_all_formats_json_summary(tmp_path):
    rng = random.Random(11)
    d = tmp_path / "in"
    d.mkdir()
    with open(d / "batch_0.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps(hermes(i)) + "\n")
    with open(d / "trajectory_samples.jsonl.gz", "wb") as f:  # one gzip member per append
        for i in range(20, 25):
            f.write(gzip.compress((json.dumps({"conversations": hermes(i)["conversations"], "timestamp":
                                               "2026-05-02T11:00:00", "model": "m", "completed": True}) + "\n").encode()))
    with open(d / "groups.jsonl", "w") as f:
        for k in range(3):
            toks = [[rng.randrange(9) for _ in range(4)] for _ in range(4)]
            f.write(json.dumps({"tokens": toks, "masks": toks, "scores": [1, 0, 0, 1], "advantages": [],
                                "messages": [[{"role": "user", "content": "q"}]] * 4}) + "\n")
    with open(d / "native.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"trajectory_id": f"n{i}", "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
                "reward": 0.5, "env": "python_debug"}) + "\n")
    (d / "broken.jsonl").write_text(json.dumps(hermes(99)) + "\n{bad\n")
    r = run("import", str(d), "--lake", str(tmp_path / "lake"), "--json")
    assert r.returncode == 1, r.stderr  # one file rejected
    s = json.loads(r.stdout)
    assert s["appended"] == 20 + 5 + 12 + 4 and s["rejected"] == 1
    bad = next(f for f in s["files"] if f["path"].endswith("broken.jsonl"))
    assert bad["line"] == 2 and "malformed JSON" in bad["error"]
    fmts = {f["path"].rsplit("/", 1)[1]: f["format"] for f in s["files"]}
    assert fmts["groups.jsonl"] == "atropos" and fmts["native.jsonl"] == "native" and fmts["batch_0.jsonl"] == "hermes"
    # re-import: nothing new (content-derived ids)
    (d / "broken.jsonl").unlink()
    r = run("import", str(d), "--lake", str(tmp_path / "lake"), "--json")
    assert r.returncode == 0
    s2 = json.loads(r.stdout)
    assert s2["appended"] == 0 and s2["duplicates"] == 41
    # the progress-bar form works too, and --format forces a parser
    r = run("import", str(d / "native.jsonl"), "--lake", str(tmp_path / "lake"), "--format", "hermes")
    assert r.returncode == 1 and "conversations" in r.stdout
    with Lake(tmp_path / "lake").snapshot() as snap:
        n = snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
        m = snap.arrow("SELECT messages FROM trajectories WHERE trajectory_id LIKE 'hermes-%' LIMIT 1").to_pylist()[0]
        errs = snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0]
    assert n == 41 and errs == 2
    a = m["messages"][2]
    assert a["reasoning"].startswith("plan") and a["tool_calls"][0]["name"] == "terminal"
    assert m["messages"][3]["tool_call_id"] == a["tool_calls"][0]["id"]
