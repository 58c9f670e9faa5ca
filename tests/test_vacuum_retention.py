"""`lake vacuum` says why it deleted nothing (issue 27 item 9): compaction's replaced files younger than the
retention (168 h by default) are counted and the command names the option that deletes them."""
import json

from typer.testing import CliRunner

from lachesis.cli import app
from tests.lake_helpers import trajectory

runner = CliRunner()


def test_vacuum_counts_and_names_what_the_retention_kept(tmp_path):
    root = str(tmp_path / "lake")
    assert runner.invoke(app, ["init", "--lake", root]).exit_code == 0
    for i in range(3):
        f = tmp_path / f"t{i}.jsonl"
        f.write_text(json.dumps(trajectory(i)) + "\n")
        assert runner.invoke(app, ["append", "trajectories", str(f), "--lake", root]).exit_code == 0
    assert runner.invoke(app, ["compact", "trajectories", "--lake", root]).exit_code == 0
    res = runner.invoke(app, ["vacuum", "trajectories", "--lake", root], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "3 replaced file(s) are younger than --retention-hours 168" in text and "--retention-hours 0" in text
    out = json.loads(runner.invoke(app, ["vacuum", "trajectories", "--lake", root, "--json"]).output)[0]
    assert (out["deleted"], out["kept_for_retention"], out["retention_hours"]) == (0, 3, 168)
    out = json.loads(runner.invoke(app, ["vacuum", "trajectories", "--lake", root, "--retain", "0", "--json"]).output)[0]
    assert (out["deleted"], out["kept_for_retention"]) == (3, 0)
    assert "--retention-hours" in runner.invoke(app, ["vacuum", "--help"], env={"COLUMNS": "200"}).output
