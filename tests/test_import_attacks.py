"""`lake import` of a folder and the views' skills-folder reader against a folder someone else controls (issue 11):
symbolic links out of the folder (to a secret, to a valid trajectory or skill, to a folder), FIFOs and devices.

What must hold: nothing outside the folder is read (no byte of a secret in the lake or in a converted folder,
no trajectory or skill from outside), nothing blocks (a FIFO is refused, not opened for a writer that never
comes), and each refused file is reported with its reason, as any rejected input is, while the rest is taken.
Each case ran as an attack before the fix: links were followed, and a FIFO blocked the command forever.
"""
import json
import os
import subprocess
import sys

import pytest

from lake import Lake
from lake.skill_files import read_skills
from tests.ingest_helpers import lake_cmd
from views.skills import read_hermes_folder

pytestmark = pytest.mark.attack

SECRET = "TOP-SECRET-51c0ffee: root:$6$saltsalt$hash:19000:0:99999:7:::"
HERMES = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}], "model": "m"}
SKILL = "---\nname: {name}\ndescription: d\n---\nbody of {name}\n"
TIMEOUT = 60  # a blocked command is killed here and the case fails


def lake_import(path, lake_root):
    r = subprocess.run(lake_cmd() + ["import", str(path), "--lake", str(lake_root), "--json"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def lake_text(root) -> str:
    with Lake(root).snapshot() as snap:
        return "\n".join(repr(snap.sql(f'SELECT * FROM "{t}"').fetchall()) for t in Lake(root).tables())


@pytest.fixture
def folders(tmp_path):
    """An inbox folder with one good file, an outside folder with a secret and a valid trajectory file."""
    inbox, outside = tmp_path / "in", tmp_path / "outside"
    inbox.mkdir()
    (outside / "more").mkdir(parents=True)
    (outside / "secret").write_text(SECRET + "\n")
    (outside / "smuggled.jsonl").write_text(json.dumps(dict(HERMES, model="smuggled")) + "\n")
    (outside / "more" / "t.jsonl").write_text(json.dumps(dict(HERMES, model="from-linked-folder")) + "\n")
    (inbox / "good.jsonl").write_text(json.dumps(HERMES) + "\n")
    Lake.init(tmp_path / "lake")
    return inbox, outside, tmp_path / "lake"


def rejected(summary) -> dict:
    return {os.path.basename(f["path"]): f["error"] for f in summary["files"] if f["error"]}


def test_import_does_not_follow_a_link_to_a_secret(folders):
    inbox, outside, root = folders
    (inbox / "leak.jsonl").symlink_to(outside / "secret")
    rc, summary, _ = lake_import(inbox, root)
    assert rc == 1 and summary["appended"] == 1
    assert "symbolic link" in rejected(summary)["leak.jsonl"]
    assert "TOP-SECRET" not in lake_text(root)  # before: the parse error's excerpt held the secret


def test_import_does_not_take_a_trajectory_file_linked_from_outside(folders):
    inbox, outside, root = folders
    (inbox / "smuggled.jsonl").symlink_to(outside / "smuggled.jsonl")
    (inbox / "more").symlink_to(outside / "more", target_is_directory=True)
    rc, summary, _ = lake_import(inbox, root)
    assert rc == 1 and summary["appended"] == 1
    assert set(rejected(summary)) == {"smuggled.jsonl", "more"}
    text = lake_text(root)
    assert "smuggled" in text  # the refusal is recorded in ingest_errors (a path, no content) ...
    with Lake(root).snapshot() as snap:  # ... and no trajectory came from outside
        assert snap.sql("SELECT model FROM trajectories").fetchall() == [("m",)]


def test_import_of_a_folder_with_a_fifo_does_not_block(folders):
    inbox, _, root = folders
    os.mkfifo(inbox / "pipe.jsonl")
    rc, summary, _ = lake_import(inbox, root)  # before: blocked on open() until the timeout
    assert rc == 1 and summary["appended"] == 1
    assert "FIFO" in rejected(summary)["pipe.jsonl"]
    with Lake(root).snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM ingest_errors").fetchall() == [(1,)]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_import_of_a_named_fifo_or_device_is_refused(tmp_path, kind):
    """Named alone on the command line: before, a FIFO or /dev/zero was silently taken for an empty folder."""
    path = tmp_path / "pipe.jsonl" if kind == "fifo" else "/dev/zero"
    if kind == "fifo":
        os.mkfifo(path)
    Lake.init(tmp_path / "lake")
    rc, summary, _ = lake_import(path, tmp_path / "lake")
    assert rc == 1 and summary["rejected"] == 1 and summary["appended"] == 0
    assert ("a FIFO" if kind == "fifo" else "a character device") in summary["files"][0]["error"]


@pytest.fixture
def skills(tmp_path):
    d, outside = tmp_path / "skills", tmp_path / "outside"
    (d / "ok").mkdir(parents=True)
    (outside / "skill").mkdir(parents=True)
    (d / "ok" / "SKILL.md").write_text(SKILL.format(name="ok"))
    (outside / "secret").write_text(SECRET + "\n")
    (outside / "skill" / "SKILL.md").write_text(SKILL.format(name="smuggled"))
    (outside / "usage.json").write_text(json.dumps({"ok": {"use_count": 99}}))
    return d, outside


def test_views_skills_reader_does_not_follow_links(skills):
    d, outside = skills
    (d / "leak").mkdir()
    (d / "leak" / "SKILL.md").symlink_to(outside / "secret")
    (d / "smuggled").mkdir()
    (d / "smuggled" / "SKILL.md").symlink_to(outside / "skill" / "SKILL.md")
    docs, errors = read_skills(d)
    assert [doc.name for doc in docs] == ["ok"]
    assert {e.path: e.kind for e in errors} == {"leak/SKILL.md": "symlink", "smuggled/SKILL.md": "symlink"}
    assert "TOP-SECRET" not in repr(errors)
    folder = read_hermes_folder(d)
    assert [s["name"] for s in folder.skills] == ["ok"] and "TOP-SECRET" not in repr(folder)


def test_views_skills_reader_does_not_take_usage_linked_from_outside(skills):
    d, outside = skills
    (d / ".usage.json").symlink_to(outside / "usage.json")
    with pytest.raises(Exception, match="symbolic link"):  # an ExportError, a one-line CLI error
        read_hermes_folder(d)


def test_views_skills_reader_does_not_block_on_a_fifo(skills):
    d, _ = skills
    (d / "pipe").mkdir()
    os.mkfifo(d / "pipe" / "SKILL.md")
    code = ("import sys; from views.skills import read_hermes_folder; f = read_hermes_folder(sys.argv[1]); "
            "print(len(f.skills), [p.kind for p in f.problems])")
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "['not_regular']"]


# Hardening IV item 3: a tool call nested 5,000 deep in a record (10 KB) was a RecursionError: a 60-line traceback
# from `lake import` and nothing of the file taken. Now a rejected file naming the line and the bound, as any.
DEEP_CALL = '<tool_call>{"name": "run", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>"
DEEP_RECORDS = {
    "hermes": dict(HERMES, conversations=[{"from": "human", "value": "hi"}, {"from": "gpt", "value": DEEP_CALL}]),
    "native": {"trajectory_id": "deep", "messages": [{"role": "user", "content": "hi"},
                                                     {"role": "assistant", "content": DEEP_CALL}]},
    "native-arguments": {"trajectory_id": "deep-args", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "name": "run", "arguments": "[" * 5000}]}]},
}


@pytest.mark.parametrize("kind", DEEP_RECORDS)
def test_import_of_a_call_nested_5000_deep_is_a_rejected_file_not_a_traceback(tmp_path, kind):
    good = HERMES if kind == "hermes" else {"trajectory_id": "ok", "messages": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(DEEP_RECORDS[kind]) + "\n")
    Lake.init(tmp_path / "lake")
    rc, summary, err = lake_import(path, tmp_path / "lake")
    assert rc == 1 and summary["rejected"] == 1 and summary["appended"] == 0, err  # all or nothing, as any file
    assert "Traceback" not in err and "RecursionError" not in err, err
    rejected_file = summary["files"][0]
    assert rejected_file["line"] == 2 and "nested deeper than 64 levels" in rejected_file["error"], rejected_file
    plain = subprocess.run(lake_cmd() + ["import", str(path), "--lake", str(tmp_path / "lake")], capture_output=True,
                           text=True, timeout=TIMEOUT)
    assert plain.returncode == 1 and "Traceback" not in plain.stdout + plain.stderr
    assert "nested deeper than" in " ".join((plain.stdout + plain.stderr).split())
