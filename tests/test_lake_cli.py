import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from lachesis.cli import app
from tests.lake_helpers import trajectory

runner = CliRunner()


@pytest.fixture
def lake_root(tmp_path, monkeypatch):
    root = tmp_path / "lake"
    monkeypatch.setenv("LAKE_ROOT", str(root))
    assert runner.invoke(app, ["init"]).exit_code == 0
    return root


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def invoke(*args):
    return runner.invoke(app, list(map(str, args)))


def test_append_then_sql_json_and_csv(lake_root, tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [trajectory(i) for i in range(5)])
    res = invoke("append", "trajectories", f, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["rows"] == 5
    out = invoke("sql", "SELECT count(*) AS n, sum(reward) AS r FROM trajectories", "--format", "json")
    assert json.loads(out.output) == [{"n": 5, "r": pytest.approx(1.0)}]
    csv = invoke("sql", "SELECT trajectory_id FROM trajectories ORDER BY 1", "--format", "csv")
    assert csv.output.splitlines() == ["trajectory_id"] + [f"traj-{i}" for i in range(5)]


def test_bad_line_fails_whole_append_with_file_line_and_field(lake_root, tmp_path):
    records = [trajectory(0), trajectory(1), {**trajectory(2), "reward": "much"}]
    f = write_jsonl(tmp_path / "bad.jsonl", records)
    res = invoke("append", "trajectories", f)
    assert res.exit_code == 2
    assert f"{f}:3: field 'reward'" in res.output and "nothing was written" in res.output
    assert "Traceback" not in res.output
    f2 = tmp_path / "broken.jsonl"
    f2.write_text(json.dumps(trajectory(0)) + "\n\n{not json\n")
    res = invoke("append", "trajectories", f2)
    assert res.exit_code == 2 and f"{f2}:3: invalid JSON" in res.output
    f3 = write_jsonl(tmp_path / "missing.jsonl", [{"messages": []}])
    assert "field 'trajectory_id': required field is missing" in invoke("append", "trajectories", f3).output
    count = invoke("sql", "SELECT count(*) AS n FROM trajectories", "--format", "json")
    assert json.loads(count.output) == [{"n": 0}]


def test_append_reads_jsonl_as_import_does_gzip_and_bounded(lake_root, tmp_path, monkeypatch):
    """`lake append` reads a file through ground/jsonl.py, the reader of `lake import`: a gzip file (two members,
    as `gzip -c a b` writes) is read through, and a line past the line bound or a truncated gzip stream is one
    line naming the file and the line, with nothing written (before: the gzip bytes were invalid JSON on line 1,
    and a line of any length was read whole into memory)."""
    import gzip

    from ground import jsonl

    lines = [json.dumps(trajectory(i)).encode() + b"\n" for i in range(3)]
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(b"".join(lines[:2])) + gzip.compress(lines[2]))
    res = invoke("append", "trajectories", gz, "--json")
    assert res.exit_code == 0 and json.loads(res.output)["rows"] == 3, res.output
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[:-12])
    res = invoke("append", "trajectories", cut)
    assert res.exit_code == 2 and f"{cut}:" in res.output and "truncated gzip stream" in res.output, res.output
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    long = write_jsonl(tmp_path / "long.jsonl", [trajectory(7), {**trajectory(8), "metadata": {"x": "y" * 2000}}])
    res = invoke("append", "trajectories", long)
    assert res.exit_code == 2 and f"{long}:2: line longer than 1000 bytes" in res.output, res.output
    assert "nothing was written" in res.output and "Traceback" not in res.output
    imp = json.loads(invoke("import", long, "--json").output)  # lake import: the same reader, the same refusal
    assert imp["rejected"] == 1 and "line longer than 1000 bytes" in imp["files"][0]["error"], imp
    assert imp["files"][0]["line"] == 2
    count = invoke("sql", "SELECT count(*) AS n FROM trajectories", "--format", "json")
    assert json.loads(count.output) == [{"n": 3}]


def test_query_error_is_duckdbs_message_without_traceback(lake_root):
    res = invoke("sql", "SELECT no_such_column FROM trajectories")
    assert res.exit_code == 1
    assert "no_such_column" in res.output and "Traceback" not in res.output


def test_as_of_returns_the_counts_of_that_version(lake_root, tmp_path):
    for k in range(3):
        invoke("append", "trajectories", write_jsonl(tmp_path / f"{k}.jsonl", [trajectory(10 * k + j) for j in range(k + 1)]))
    q = "SELECT count(*) AS n FROM trajectories"
    counts = [json.loads(invoke("sql", q, "--as-of", v, "--format", "json").output)[0]["n"] for v in range(4)]
    assert counts == [0, 1, 3, 6]
    pinned = invoke("sql", q, "--as-of", "trajectories=2", "--format", "json")
    assert json.loads(pinned.output) == [{"n": 3}]
    assert invoke("sql", q, "--as-of", "trajectories=x").exit_code == 2


def test_replayed_batch_via_cli_adds_nothing(lake_root, tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [trajectory(1)])
    first = json.loads(invoke("append", "trajectories", f, "--writer-id", "nightly", "--seq", 7, "--json").output)
    again = json.loads(invoke("append", "trajectories", f, "--writer-id", "nightly", "--seq", 7, "--json").output)
    assert (first["duplicate"], again["duplicate"], again["rows"]) == (False, True, 0)


def test_tables_log_compact_vacuum_consumers(lake_root, tmp_path):
    for k in range(3):
        invoke("append", "trajectories", write_jsonl(tmp_path / f"{k}.jsonl", [trajectory(k)]))
    tables = {r["table"]: r for r in json.loads(invoke("tables", "--json").output)}
    assert tables["trajectories"]["rows"] == 3 and tables["trajectories"]["files"] == 3
    log = json.loads(invoke("log", "trajectories", "--json").output)
    assert [r["operation"] for r in log][:1] == ["WRITE"] and log[-1]["operation"] == "CREATE TABLE"
    comp = json.loads(invoke("compact", "trajectories", "--json").output)
    assert comp[0]["files_removed"] == 3 and comp[0]["files_added"] == 1
    vac = json.loads(invoke("vacuum", "trajectories", "--retention-hours", 0, "--json").output)
    assert vac[0]["deleted"] == 3
    assert json.loads(invoke("tables", "--json").output)[0]["rows"] == 3
    assert json.loads(invoke("consumers", "--json").output) == []
    assert invoke("log", "nope").exit_code == 2


def test_missing_lake_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "none"))
    res = invoke("tables")
    assert res.exit_code == 2 and "lake init" in res.output


def test_lake_command_starts_without_torch_the_lake_or_the_environments(tmp_path):
    """Building the `lake` command line (and the guide's own commands) imports the command modules and their config
    dataclasses only: each command imports what it runs when it runs (every start in the suite paid 0.3 CPU-s for
    the lake, duckdb and the environments when hermes_eval's settings lived beside the evaluation loop)."""
    code = ("import sys; from lachesis.cli import app; import lachesis.train_cli, lachesis.rl_cli; "
            "bad = [m for m in ('torch', 'transformers', 'trl', 'peft', 'lake', 'envs', 'duckdb', 'gymnasium') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
