"""`lake watch`: the real Hermes Agent skill corpus, skill/usage events, reconcile at start, the inbox."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest.samples import extract_corpus, sample_skills_tree
from ingest.watch import Watcher
from lake import Lake
from tests.ingest_helpers import WatchProcess


def _expected(root: Path):
    """name -> category by Hermes' own rules (frontmatter name line; first path part at depth >= 3)."""
    out = {}
    for p in root.rglob("SKILL.md"):
        rel = p.relative_to(root).parts
        name = next(line.split(":", 1)[1].strip() for line in p.read_text().splitlines() if line.startswith("name:"))
        out[name] = rel[0] if len(rel) >= 3 else None
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The packaged hermes-agent 0.19.0 skill corpus, as the sdist lays it out."""
    return extract_corpus(tmp_path_factory.mktemp("corpus"))


def test_hermes_corpus_ingested_completely(tmp_path, corpus):
    skills = tmp_path / "skills"
    # the bundled tree as Hermes seeds it, plus the optional skills installed from the hub
    shutil.copytree(corpus / "skills", skills)
    shutil.copytree(corpus / "optional-skills", skills, dirs_exist_ok=True)
    expected = _expected(skills)
    assert len(expected) == 177
    bundled = sorted(_expected(corpus / "skills"))
    (skills / ".bundled_manifest").write_text("".join(f"{n}:0123abcd\n" for n in bundled))
    (skills / ".hub").mkdir()
    hub_dirs = {p.parent.name for p in (corpus / "optional-skills").rglob("SKILL.md")}
    lock = {"version": 1, "installed": {d: {"source": "official", "identifier": f"official/x/{d}"} for d in hub_dirs}}
    (skills / ".hub" / "lock.json").write_text(json.dumps(lock))
    (skills / ".hub" / "quarantine").mkdir()
    (skills / ".hub" / "quarantine" / "SKILL.md").write_text("---\nname: quarantined\n---\nx\n")  # skipped
    usage = {"github-pr-workflow": {"use_count": 7, "view_count": 9, "created_by": "agent"}}
    (skills / ".usage.json").write_text(json.dumps(usage, indent=2, sort_keys=True))
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, settle=0)
    w.scan()
    with lk.snapshot() as snap:
        rows = snap.arrow("SELECT name, category, provenance, frontmatter, body, deleted FROM skills").to_pylist()
        use = snap.arrow("SELECT name, use_count, view_count, patch_count FROM skill_usage").to_pylist()
        errs = snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0]
    assert errs == 0
    assert len(rows) == 177
    assert {r["name"]: r["category"] for r in rows} == expected
    prov = {r["name"]: r["provenance"] for r in rows}
    assert {n for n, p in prov.items() if p == "bundled"} == set(bundled)
    assert sum(p == "hub" for p in prov.values()) == 104
    assert all(json.loads(r["frontmatter"])["name"] == r["name"] and r["body"].strip() for r in rows)
    assert use == [{"name": "github-pr-workflow", "use_count": 7, "view_count": 9, "patch_count": 0}]
    assert {r["category"] for r in rows} >= {"mlops", "github", "creative"}
    # a second pass over unchanged content writes nothing
    v = {t: lk.version(t) for t in ("skills", "skill_usage")}
    w.scan()
    assert {t: lk.version(t) for t in ("skills", "skill_usage")} == v


def test_sample_skills_tree_is_the_corpus_in_hermes_layout(tmp_path, corpus):
    """The packaged sample skills (what the demo loads) are the whole corpus: bundled + hub-installed."""
    tree = sample_skills_tree(tmp_path / "skills")
    assert _expected(tree) == {**_expected(corpus / "skills"), **_expected(corpus / "optional-skills")}
    manifest = (tree / ".bundled_manifest").read_text().split()
    assert sorted(line.split(":")[0] for line in manifest) == sorted(_expected(corpus / "skills"))
    assert len(json.loads((tree / ".hub" / "lock.json").read_text())["installed"]) == 104
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=tree, settle=0)
    w.scan()
    with lk.snapshot() as snap:
        prov = dict(snap.sql("SELECT provenance, count(*) FROM skills GROUP BY 1").fetchall())
    assert prov == {"bundled": len(manifest), "hub": 104}


def test_skill_changes_deletes_usage_and_reconcile(tmp_path):
    skills = tmp_path / "skills"
    (skills / "dev" / "alpha").mkdir(parents=True)
    (skills / "beta").mkdir(parents=True)
    a = skills / "dev" / "alpha" / "SKILL.md"
    a.write_text("---\nname: alpha\ndescription: a\n---\nbody one\n")
    (skills / "beta" / "SKILL.md").write_text("---\nname: beta\ndescription: b\n---\nbody\n")
    (skills / "dev" / "alpha" / "SKILL.md.swp").write_bytes(b"\x00\x01 vim swap")  # editor temp file: ignored
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, settle=0)
    w.scan()
    a.write_text("---\nname: alpha\ndescription: a\n---\nbody two\n")
    w.scan()
    w.scan()  # unchanged: nothing
    shutil.rmtree(skills / "beta")
    w.scan()
    # changes while the watcher is down are reconciled by a new watcher at start
    (skills / "dev" / "gamma").mkdir()
    (skills / "dev" / "gamma" / "SKILL.md").write_text("---\nname: gamma\ndescription: g\n---\nG\n")
    a.unlink()
    (skills / ".usage.json").write_text(json.dumps({"gamma": {"use_count": 1}}))
    w2 = Watcher(lk, skills_dir=skills, settle=0)
    w2.scan()
    (skills / ".usage.json").write_text(json.dumps({"gamma": {"use_count": 2}}))
    w2.scan()
    with lk.snapshot() as snap:
        ev = snap.sql("SELECT name, event_type, body FROM skills ORDER BY ingested_at, event_id").fetchall()
        use = snap.sql("SELECT name, use_count FROM skill_usage ORDER BY ingested_at").fetchall()
        errs = snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0]
    assert [(n, t) for n, t, _ in ev] == [("beta", "skill.upsert"), ("alpha", "skill.upsert"),
                                          ("alpha", "skill.upsert"), ("beta", "skill.delete"),
                                          ("gamma", "skill.upsert"), ("alpha", "skill.delete")]
    assert ev[2][2] == "body two\n"
    assert use == [("gamma", 1), ("gamma", 2)]
    assert errs == 0


def test_half_written_file_waits_until_stable(tmp_path):
    skills = tmp_path / "skills"
    (skills / "s").mkdir(parents=True)
    p = skills / "s" / "SKILL.md"
    p.write_text("---\nname: slow\n")  # half-written: frontmatter not closed yet
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, settle=0.4)
    w.scan()
    with open(p, "a") as f:
        f.write("description: d\n---\nbody\n")
    w.scan()
    time.sleep(0.5)
    w.scan()
    with lk.snapshot() as snap:
        assert snap.sql("SELECT name FROM skills").fetchall() == [("slow",)]
        assert snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0] == 0


def test_inbox_live_watch_process(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    Lake.init(tmp_path / "lake")
    rec = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "<think>\n</think>\nyo"}],
           "timestamp": "2026-05-02T10:00:00", "model": "m", "completed": True}
    with WatchProcess(tmp_path / "lake", inbox=inbox, settle=0.2, interval=0.3) as wp:
        data = b"".join(gzip.compress((json.dumps(dict(rec, model=f"m{i}")) + "\n").encode()) for i in range(5))
        tmpname = inbox / ".incoming.jsonl.gz.part"
        tmpname.write_bytes(data)
        os.replace(tmpname, inbox / "traj.jsonl.gz")
        (inbox / "bad.jsonl").write_text(json.dumps(rec) + "\n{not json\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (inbox / ".done" / "traj.jsonl.gz").exists() and (inbox / ".rejected" / "bad.jsonl.error.txt").exists():
                break
            time.sleep(0.1)
        assert wp.alive()
    assert (inbox / ".done" / "traj.jsonl.gz").exists()
    err = (inbox / ".rejected" / "bad.jsonl.error.txt").read_text()
    assert "line: 2" in err and "malformed JSON" in err
    with Lake(tmp_path / "lake").snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 5
        e = snap.arrow("SELECT reason, line, source_path FROM ingest_errors").to_pylist()
    assert len(e) == 1 and e[0]["line"] == 2 and e[0]["source_path"].endswith("bad.jsonl")


def test_inbox_takes_only_trajectory_files(tmp_path):
    """Defect 17: pointed at Hermes' working directory, the inbox takes the trajectory files Hermes and
    batch_runner write (JSON lines, plain or gzip) and leaves every other file where it is, unchanged."""
    inbox = tmp_path / "hermes-cwd"
    inbox.mkdir()
    rec = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
           "timestamp": "2026-05-02T10:00:00", "model": "m", "completed": True}
    (inbox / "trajectory_samples.jsonl").write_text(json.dumps(rec) + "\n")
    with open(inbox / "failed_trajectories.jsonl.gz", "wb") as f:  # one gzip member per append (newer Hermes)
        for i in range(2):
            f.write(gzip.compress((json.dumps(dict(rec, completed=False, model=f"m{i}")) + "\n").encode()))
    (inbox / "trajectories.jsonl").write_text(json.dumps(dict(rec, model="batch")) + "\n")
    others = {"notes.md": "# my notes\n", "run_agent.py": "print('hi')\n", "checkpoint.json": '{"run_name": "r"}',
              "statistics.json": "{}", "README": "x", "data.csv": "a,b\n"}
    for name, text in others.items():
        (inbox / name).write_text(text)
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, inbox_dir=inbox, settle=0)
    w.scan()
    assert sorted(p.name for p in (inbox / ".done").iterdir()) == [
        "failed_trajectories.jsonl.gz", "trajectories.jsonl", "trajectory_samples.jsonl"]
    assert not (inbox / ".rejected").exists()
    assert {n: (inbox / n).read_text() for n in others} == others
    assert w.stats["files_done"] == 3 and w.stats["trajectories"] == 4 and w.stats["files_rejected"] == 0
    with lk.snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 4
        assert snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0] == 0


def test_watch_once_cli_summary_and_json(tmp_path):
    """`lake watch --once` says what it did in one readable line; --json prints the counts."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    rec = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    (inbox / "a.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(dict(rec, model="m2")) + "\n")
    (inbox / "bad.jsonl").write_text("{oops\n")
    cmd = [sys.executable, "-c", "from lachesis.cli import main; main()", "watch", "--once", "--inbox", str(inbox),
           "--lake", str(tmp_path / "lake")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("inbox: 1 file(s) ingested (2 trajectories, 0 duplicate(s)), 1 rejected; "
                        "1 error(s) recorded in ingest_errors\n")
    (inbox / "b.jsonl").write_text(json.dumps(rec) + "\n")  # already in the lake: a duplicate
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["files_done"] == 1 and stats["trajectories"] == 0 and stats["duplicates"] == 1
