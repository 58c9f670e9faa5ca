"""`lake watch --hermes-dir` (issue 27 item 5): pointed at the folder Hermes Agent runs in, the watcher takes only
Hermes' own trajectory file names and leaves the user's own .jsonl files where they are, saying so once;
`--inbox` stays a dedicated folder that takes every trajectory file."""
import gzip
import json

import pytest
from typer.testing import CliRunner

from ingest.inbox import is_hermes_file
from ingest.watch import Watcher
from lachesis.cli import app
from lake import Lake

REC = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
       "timestamp": "2026-05-02T10:00:00", "model": "m", "completed": True}


def _line(i: int) -> str:
    return json.dumps(dict(REC, model=f"m{i}")) + "\n"


@pytest.mark.parametrize("name, taken", [
    ("trajectory_samples.jsonl", True), ("trajectory_samples_20260502.jsonl.gz", True),
    ("failed_trajectories.jsonl", True), ("failed_trajectories.jsonl.gz", True), ("trajectories.jsonl", True),
    ("mydata.jsonl", False), ("trajectories_mine.jsonl", False), ("trajectory_samples.json", False),
    (".trajectory_samples.jsonl", False), ("trajectory_samples.jsonl.part", False)])
def test_hermes_names(name, taken):
    assert is_hermes_file(name) is taken


def test_hermes_dir_takes_hermes_files_and_leaves_the_users_own_said_once(tmp_path):
    cwd = tmp_path / "hermes-cwd"
    cwd.mkdir()
    (cwd / "trajectory_samples.jsonl").write_text(_line(0) + _line(1))
    (cwd / "failed_trajectories.jsonl.gz").write_bytes(gzip.compress(_line(2).encode()))
    (cwd / "mydata.jsonl").write_text("{my own data, not a trajectory}\n")
    (cwd / "notes.md").write_text("notes")
    said: list[str] = []
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, hermes_dir=cwd, settle=0, echo=said.append)
    w.scan()
    w.scan()
    assert (cwd / ".done" / "trajectory_samples.jsonl").exists() and (cwd / ".done" / "failed_trajectories.jsonl.gz").exists()
    assert (cwd / "mydata.jsonl").read_text() == "{my own data, not a trajectory}\n"  # where it was, unchanged
    assert not (cwd / ".rejected").exists()
    left = [m for m in said if "mydata.jsonl" in m]
    assert len(left) == 1 and "where it is" in left[0] and "lake import" in left[0]
    assert "1 other .jsonl file(s) left where they are" in w.summary()
    with lk.snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 3
        assert snap.sql("SELECT count(*) FROM ingest_errors").fetchall()[0][0] == 0


def test_inbox_is_a_dedicated_folder_and_cli_takes_one_rule(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "mydata.jsonl").write_text(_line(5))
    runner = CliRunner()
    res = runner.invoke(app, ["watch", "--inbox", str(inbox), "--once", "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0, res.output
    assert (inbox / ".done" / "mydata.jsonl").exists()  # a dedicated inbox takes any trajectory file
    both = runner.invoke(app, ["watch", "--inbox", str(inbox), "--hermes-dir", str(tmp_path), "--once"])
    assert both.exit_code == 2 and "not both" in both.output
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "mine.jsonl").write_text(_line(6))
    res = runner.invoke(app, ["watch", "--hermes-dir", str(cwd), "--once", "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0, res.output
    assert (cwd / "mine.jsonl").exists() and "left mine.jsonl where it is" in " ".join(res.output.split())
