"""One dedupe rule for trajectories whichever way they arrive (issue 27 item 8): a trajectory_id already in the
lake, or earlier in the same file, is a duplicate, skipped and counted, by `lake append` as by `lake import` and
POST /v1/trajectories (before: the same file appended twice gave 2 rows of each)."""
import json

from typer.testing import CliRunner

from lachesis.cli import app

runner = CliRunner()


def _count(root) -> int:
    res = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM trajectories", "--format", "json", "--lake", str(root)])
    return json.loads(res.output)[0]["n"]


def test_the_same_file_appended_twice_and_imported_gives_each_trajectory_once(tmp_path):
    root = tmp_path / "lake"
    assert runner.invoke(app, ["init", "--lake", str(root)]).exit_code == 0
    recs = [{"trajectory_id": f"t-{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)]
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs + [recs[0]]))  # t-0 twice in the file too
    first = runner.invoke(app, ["append", "trajectories", str(f), "--lake", str(root), "--json"])
    assert first.exit_code == 0, first.output
    assert (json.loads(first.output)["rows"], json.loads(first.output)["duplicates"]) == (3, 1)
    again = runner.invoke(app, ["append", "trajectories", str(f), "--lake", str(root)])
    assert again.exit_code == 0 and "appended 0 rows" in again.output and "4 duplicate" in again.output
    assert _count(root) == 3
    imp = runner.invoke(app, ["import", str(f), "--lake", str(root), "--json"])
    assert imp.exit_code == 0 and json.loads(imp.output)["appended"] == 0
    assert _count(root) == 3
