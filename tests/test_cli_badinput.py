"""Bad input on the command line (issue 11 item 9): valid JSON nested 300 deep and an `occurred_at` of 1e20
seconds were tracebacks in `lake append`, `lake import`, `lake watch --once` and `skill_to_instruction`.
Each is now one `error:`/`rejected` line, nothing of the bad input is written, and (watch) the files after it
are still ingested."""
import json
import subprocess
import sys

import pytest

from lake import Lake

DEEP = {"leaf": 1}
for _ in range(300):
    DEEP = {"x": DEEP}
CLI = [sys.executable, "-c", "from lachesis.cli import main; main()"]
S2I = [sys.executable, "-c", "from lachesis.views_cli import skill_to_instruction_main; skill_to_instruction_main()"]
BAD_RECORDS = {
    "deep": ({"trajectory_id": "d1", "messages": [], "metadata": DEEP}, "254 levels"),
    "occurred": ({"trajectory_id": "d2", "messages": [], "occurred_at": 1e20}, "out of range"),
}


def _run(cmd, cwd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    return r


def _rows(root, table="trajectories") -> int:
    with Lake(root).snapshot() as snap:
        return snap.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


@pytest.mark.attack
@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_lake_append_and_import_one_line(tmp_path, case):
    rec, why = BAD_RECORDS[case]
    Lake.init(tmp_path / "the-lake")
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    r = _run(CLI + ["append", "trajectories", str(f), "--lake", str(tmp_path / "the-lake")], tmp_path)
    assert r.returncode != 0 and why in r.stderr and "nothing was written" in r.stderr, r.stderr
    r = _run(CLI + ["import", str(f), "--lake", str(tmp_path / "the-lake")], tmp_path)
    assert r.returncode == 1 and "rejected" in r.stdout and why in " ".join(r.stdout.split()), r.stdout
    assert _rows(tmp_path / "the-lake") == 0


@pytest.mark.attack
def test_watch_once_rejects_and_goes_on(tmp_path):
    inbox, skills = tmp_path / "inbox", tmp_path / "skills"
    inbox.mkdir()
    (skills / "deep").mkdir(parents=True)
    (inbox / "a-deep.jsonl").write_text(json.dumps({"conversations": [{"from": "human", "value": "x"}],
                                                    "metadata": DEEP}) + "\n")
    (inbox / "b-occurred.jsonl").write_text(json.dumps(BAD_RECORDS["occurred"][0]) + "\n")
    (inbox / "c-good.jsonl").write_text(json.dumps({"trajectory_id": "ok", "messages": []}) + "\n")
    (skills / "deep" / "SKILL.md").write_text("---\nname: deep\nx: " + "[" * 300 + "]" * 300 + "\n---\nbody\n")
    (skills / ".usage.json").write_text(json.dumps({"deep": {"use_count": 3, "x": DEEP},
                                                    "fine": {"use_count": 1}}))
    r = _run(CLI + ["watch", "--once", "--json", "--inbox", str(inbox), "--skills", str(skills),
                    "--lake", str(tmp_path / "the-lake")], tmp_path)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["files_done"] == 1 and stats["files_rejected"] == 2 and stats["usage_events"] == 1, stats
    assert sorted(p.name for p in (inbox / ".rejected").iterdir() if not p.name.endswith(".txt")) == [
        "a-deep.jsonl", "b-occurred.jsonl"]
    with Lake(tmp_path / "the-lake").snapshot() as snap:
        assert snap.sql("SELECT trajectory_id FROM trajectories").fetchall() == [("ok",)]
        assert snap.sql("SELECT name FROM skill_usage").fetchall() == [("fine",)]
        assert snap.sql("SELECT count(*) FROM skills").fetchall()[0][0] == 0
        reasons = [x[0] for x in snap.sql("SELECT reason FROM ingest_errors").fetchall()]
    assert any("levels deep" in x for x in reasons) and any("out of range" in x for x in reasons), reasons


@pytest.mark.attack
def test_skill_to_instruction_one_line(tmp_path):
    skills = tmp_path / "skills"
    (skills / "s").mkdir(parents=True)
    (skills / "s" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbody\n")
    (skills / ".usage.json").write_text(json.dumps({"s": {"use_count": 9, "created_by": "agent", "x": DEEP}}))
    r = _run(S2I + ["--skills", str(skills), "-o", str(tmp_path / "out"), "--min-uses", "0"], tmp_path)
    assert r.returncode != 0 and r.stderr.startswith("error:") and "254 levels" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
