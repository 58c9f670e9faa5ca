"""tests/fault_figures.py: figures go to LACHESIS_FAULTS_OUT only when it is set, and the `just faults` summary
flags any loss, any breached attack and any figure its test never recorded."""
import json

from tests import fault_figures as ff


def test_record_writes_only_when_asked(tmp_path, monkeypatch):
    out = tmp_path / "f.jsonl"
    monkeypatch.delenv(ff.ENV, raising=False)
    ff.record("x", tried=3, unit="rows", lost=0)
    assert not out.exists()
    monkeypatch.setenv(ff.ENV, str(out))
    ff.record("lake serve kill -9 (10 kills)", tried=120, unit="acknowledged trajectories", lost=0, duplicated=0)
    ff.record_attacks({"test_sandbox_escape": {"contained": 5, "breached": 0, "skipped": 1}})
    ff.record_attacks({"test_sandbox_escape": {"contained": 2, "breached": 0, "skipped": 0}})
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["faults"] == {"lost": 0, "duplicated": 0} and lines[0]["tried"] == 120
    figures, attacks = ff.read(out)
    assert len(figures) == 1 and attacks == {"test_sandbox_escape": {"contained": 7, "breached": 0, "skipped": 1}}


def fig(name, test="tests/t.py::test_a", **faults):
    return {"figure": name, "test": test, "tried": 10, "unit": "rows", "faults": faults}


def test_summary_lines_and_verdict():
    figures = [fig("lake serve kill -9", lost=0, duplicated=0),
               fig("rows after 2 writers", test="tests/t.py::test_b[s3]", lost=0)]
    attacks = {"test_server_badinput": {"contained": 60, "breached": 0, "skipped": 0},
               "test_cli_badinput": {"contained": 9, "breached": 0, "skipped": 0},
               "test_sandbox_escape": {"contained": 20, "breached": 0, "skipped": 2}}
    lines, ok = ff.summarize(figures, attacks, ["lake serve kill -9", "rows after 2 writers"])
    assert ok
    assert lines == ["lake serve kill -9: 10 rows; lost 0, duplicated 0",
                     "rows after 2 writers [s3]: 10 rows; lost 0",
                     "bad inputs: 69 tried, 69 rejected cleanly, nothing written, 0 breached "
                     "(server_badinput 60, cli_badinput 9)",
                     "sandbox escapes: 20 tried, 20 contained, 0 breached, 2 skipped (kernel feature absent) "
                     "(sandbox_escape 20)"]


def test_a_loss_a_breach_or_a_missing_figure_fails():
    ok_fig = [fig("a", lost=0)]
    assert not ff.summarize([fig("a", lost=1)], {}, ["a"])[1]
    assert not ff.summarize(ok_fig, {"test_sandbox_escape": {"contained": 1, "breached": 1, "skipped": 0}}, ["a"])[1]
    lines, ok = ff.summarize(ok_fig, {}, ["a", "consumer killed at random"])
    assert not ok and lines[-1] == "consumer killed at random: NOT RECORDED (its test failed or did not run)"
    # a parametrized figure is expected once per parameter
    local = [fig("rows after 2 writers + compaction", test="tests/t.py::test_b[local]", lost=0)]
    assert ff.summarize(local, {}, ["rows after 2 writers [local]"])[1]
    lines, ok = ff.summarize(local, {}, ["rows after 2 writers [local]", "rows after 2 writers [s3]"])
    assert not ok and lines[-1].startswith("rows after 2 writers [s3]: NOT RECORDED")
