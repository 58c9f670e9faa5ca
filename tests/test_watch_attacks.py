"""`lake watch` against a folder someone else controls (issue 11 item 2): symbolic links out of the folder,
FIFOs and devices, files past the size limit, and files that fail on every pass.

What must hold: no byte of a file outside the watched folder reaches the lake (not in `skills`, not in
`ingest_errors.excerpt`, not in `skills.metadata`); no file blocks a pass or the exit on SIGTERM; a bad file
is recorded once and the others are taken; negative usage counts are refused.
"""
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from edge.errors import BadInput
from ingest.safe_files import Refused, open_file, read_file
from ingest.settling import Backoff
from ingest.watch import Watcher
from lake import Lake
from tests.ingest_helpers import WatchProcess

SECRET = "TOP-SECRET-7f3a9c: root:$6$saltsalt$hash:19000:0:99999:7:::"
GOOD_SKILL = "---\nname: {name}\ndescription: d\n---\nbody of {name}\n"


def _lake_text(lk: Lake) -> str:
    """Every value of every table, as one string (to look for bytes that must not be there)."""
    out = []
    with lk.snapshot() as snap:
        for t in lk.tables():
            out.append(repr(snap.sql(f'SELECT * FROM "{t}"').fetchall()))
    return "\n".join(out)


def _count(lk: Lake, sql: str) -> int:
    with lk.snapshot() as snap:
        return snap.sql(sql).fetchall()[0][0]


@pytest.fixture
def outside(tmp_path):
    """A folder outside the watched ones: a secret, a valid skill, a usage file and a hub lock."""
    d = tmp_path / "outside"
    (d / "skill").mkdir(parents=True)
    (d / "secret").write_text(SECRET + "\n")
    (d / "skill" / "SKILL.md").write_text(GOOD_SKILL.format(name="smuggled"))
    (d / "usage.json").write_text(json.dumps({"ok": {"use_count": 99}}))
    (d / "lock.json").write_text(json.dumps({"installed": {"ok": {"source": SECRET}}}))
    return d


def _scan_within(w: Watcher, seconds: float = 20.0) -> None:
    """One pass, which must end: a reader blocked on a FIFO would hold it forever."""
    t = threading.Thread(target=w.scan, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the watcher's pass is blocked"


@pytest.mark.attack
def test_skill_links_out_of_the_folder_are_not_followed(tmp_path, outside):
    skills = tmp_path / "skills"
    for d in ("ok", "shadow", "smuggled", "cat/sub", "cat/desc-link"):
        (skills / d).mkdir(parents=True)
    (skills / "ok" / "SKILL.md").write_text(GOOD_SKILL.format(name="ok"))
    (skills / "shadow" / "SKILL.md").symlink_to(outside / "secret")  # the /etc/shadow case
    (skills / "smuggled" / "SKILL.md").symlink_to(outside / "skill" / "SKILL.md")  # a valid skill from outside
    (skills / "linked-dir").symlink_to(outside / "skill", target_is_directory=True)
    (skills / "cat" / "DESCRIPTION.md").symlink_to(outside / "secret")  # -> skills.metadata before
    (skills / "cat" / "sub" / "SKILL.md").write_text(GOOD_SKILL.format(name="sub"))
    (skills / ".usage.json").symlink_to(outside / "usage.json")
    (skills / ".hub").mkdir()
    (skills / ".hub" / "lock.json").symlink_to(outside / "lock.json")
    (skills / ".bundled_manifest").symlink_to(outside / "secret")
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, settle=0)
    for _ in range(3):  # every pass sees the same links: each is recorded once
        _scan_within(w)
    text = _lake_text(lk)
    assert "TOP-SECRET" not in text
    with lk.snapshot() as snap:
        assert sorted(r[0] for r in snap.sql("SELECT name FROM skills").fetchall()) == ["ok", "sub"]
        assert {r[0] for r in snap.sql("SELECT provenance FROM skills").fetchall()} == {"agent"}
        assert snap.sql("SELECT count(*) FROM skill_usage").fetchall()[0][0] == 0
        errs = snap.arrow("SELECT source_path, reason, excerpt FROM ingest_errors").to_pylist()
    refused = sorted(Path(e["source_path"]).relative_to(skills).as_posix() for e in errs)
    assert refused == [".bundled_manifest", ".hub/lock.json", ".usage.json", "cat/DESCRIPTION.md",
                       "shadow/SKILL.md", "smuggled/SKILL.md"], errs
    assert all("symbolic link" in e["reason"] and e["excerpt"] is None for e in errs)


@pytest.mark.attack
def test_fifo_and_device_links_never_block(tmp_path):
    skills, inbox = tmp_path / "skills", tmp_path / "inbox"
    (skills / "fifo").mkdir(parents=True)
    (skills / "zero").mkdir()
    inbox.mkdir()
    os.mkfifo(skills / "fifo" / "SKILL.md")
    (skills / "zero" / "SKILL.md").symlink_to("/dev/zero")
    os.mkfifo(skills / ".usage.json")
    os.mkfifo(inbox / "pipe.jsonl")  # not a regular file: left alone, never opened
    (inbox / "zero.jsonl").symlink_to("/dev/zero")
    (inbox / "good.jsonl").write_text(json.dumps({"trajectory_id": "t1", "messages": []}) + "\n")
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, inbox_dir=inbox, settle=0)
    _scan_within(w)
    assert (inbox / ".done" / "good.jsonl").exists()
    assert (inbox / "pipe.jsonl").exists() and (inbox / "zero.jsonl").is_symlink()
    with lk.snapshot() as snap:
        reasons = sorted(r[0] for r in snap.sql("SELECT reason FROM ingest_errors").fetchall())
    assert any("FIFO" in r for r in reasons) and any("symbolic link" in r for r in reasons), reasons
    assert _count(lk, "SELECT count(*) FROM trajectories") == 1


@pytest.mark.attack
def test_watch_process_with_a_fifo_skill_takes_the_inbox_and_stops_on_sigterm(tmp_path):
    """Before: the FIFO blocked `lake watch` in open() forever; the inbox was never read and SIGTERM was
    ignored."""
    skills, inbox = tmp_path / "skills", tmp_path / "inbox"
    (skills / "fifo").mkdir(parents=True)
    inbox.mkdir()
    os.mkfifo(skills / "fifo" / "SKILL.md")
    Lake.init(tmp_path / "lake")
    wp = WatchProcess(tmp_path / "lake", skills=skills, inbox=inbox, settle=0.1, interval=0.3,
                      log_path=tmp_path / "watch.log").start()
    try:
        (inbox / "t.jsonl").write_text(json.dumps({"trajectory_id": "t1", "messages": []}) + "\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (inbox / ".done" / "t.jsonl").exists():
            time.sleep(0.1)
        assert (inbox / ".done" / "t.jsonl").exists()
        wp.proc.send_signal(signal.SIGTERM)
        assert wp.proc.wait(timeout=15) is not None
    finally:
        if wp.alive():  # unblock a stuck reader so the process can be reaped
            fd = os.open(skills / "fifo" / "SKILL.md", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            wp.kill()


@pytest.mark.attack
def test_too_large_files_are_refused_without_reading_them(tmp_path):
    skills = tmp_path / "skills"
    (skills / "big").mkdir(parents=True)
    (skills / "big" / "SKILL.md").write_bytes(b"---\nname: big\n---\n" + SECRET.encode() + b"x" * (2 << 20))
    lk = Lake.init(tmp_path / "lake")
    Watcher(lk, skills_dir=skills, settle=0).scan()
    with lk.snapshot() as snap:
        errs = snap.arrow("SELECT reason, excerpt FROM ingest_errors").to_pylist()
    assert len(errs) == 1 and "more than the limit" in errs[0]["reason"] and errs[0]["excerpt"] is None
    assert "TOP-SECRET" not in _lake_text(lk)


def test_read_file_refuses_links_on_the_way_and_stops_at_the_limit(tmp_path, outside):
    root = tmp_path / "root"
    root.mkdir()
    (root / "via").symlink_to(outside / "skill", target_is_directory=True)
    with pytest.raises(Refused, match="symbolic link"):
        read_file(root, "via/SKILL.md", 1 << 20)
    with pytest.raises(Refused, match="inside the folder"):
        read_file(root, "../outside/secret", 1 << 20)
    (root / "f").write_bytes(b"abcdef")
    assert read_file(root, "f", 6) == b"abcdef"
    with pytest.raises(BadInput, match="more than the limit"):
        read_file(root, "f", 5)
    with open_file(root, "f") as (fh, st):
        assert st.st_size == 6 and fh.read() == b"abcdef"


@pytest.mark.attack
def test_a_bad_file_is_recorded_once_and_the_others_proceed(tmp_path):
    """A file that fails on every pass (here: metadata nested 300 deep, which raised on every pass before and
    kept the files after it out) is rejected once and moved aside; the files after it are taken."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    deep = {"leaf": 1}
    for _ in range(300):
        deep = {"x": deep}
    (inbox / "a.jsonl").write_text(json.dumps({"trajectory_id": "a", "messages": [], "metadata": deep}) + "\n")
    for name in ("b", "c"):
        (inbox / f"{name}.jsonl").write_text(json.dumps({"trajectory_id": name, "messages": []}) + "\n")
    skills = tmp_path / "skills"
    (skills / "bad").mkdir(parents=True)
    (skills / "bad" / "SKILL.md").write_text("no frontmatter\n")
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, inbox_dir=inbox, settle=0)
    for _ in range(3):
        w.scan()
    assert sorted(p.name for p in (inbox / ".done").iterdir()) == ["b.jsonl", "c.jsonl"]
    assert (inbox / ".rejected" / "a.jsonl").exists()
    with lk.snapshot() as snap:
        assert sorted(r[0] for r in snap.sql("SELECT trajectory_id FROM trajectories").fetchall()) == ["b", "c"]
        errs = sorted(Path(r[0]).name for r in snap.sql("SELECT source_path FROM ingest_errors").fetchall())
    assert errs == ["SKILL.md", "a.jsonl"]


def test_backoff_spaces_retries_and_a_changed_file_goes_first():
    b = Backoff(cap_s=300)
    assert b.ready("f", 1)
    assert b.failed("f", 1) == 1 and b.ready("f", 1)  # the first retry: the next pass
    assert b.failed("f", 1) == 2 and not b.ready("f", 1)  # then 1 s, 2 s, ...
    assert b.ready("f", 2)  # the file changed: tried at once
    assert b.failed("f", 2) == 1
    b.ok("f")
    assert b.ready("f", 1)


@pytest.mark.attack
def test_negative_usage_counts_are_refused(tmp_path):
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / ".usage.json").write_text(json.dumps({"neg": {"use_count": -5}, "frac": {"view_count": 1.5},
                                                    "fine": {"use_count": 2}}))
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=skills, settle=0)
    w.scan()
    w.scan()
    with lk.snapshot() as snap:
        assert snap.sql("SELECT name, use_count FROM skill_usage").fetchall() == [("fine", 2)]
        errs = sorted((r[0], r[1]) for r in snap.sql("SELECT field, reason FROM ingest_errors").fetchall())
    assert [f for f, _ in errs] == ["frac", "neg"] and ">= 0" in errs[1][1], errs
