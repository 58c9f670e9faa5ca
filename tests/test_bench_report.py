"""bench/report.py on small synthetic results files (its formatting, not the benchmarks): one row per comparison
with the baseline named, both figures, the ratio, the target checked either way, date, machine and load; the
ratio PNG; the results page's tables replaced between its markers and nothing else touched."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402  (bench/report.py)

META = {"date": "2026-12-03 12:00 UTC", "machine": "2 cores, Test CPU, Linux 6.1", "load_avg_1m": [0.5, 1.25]}


def wrap(bench, results, **meta):
    return {"meta": {**META, "bench": bench, **meta}, "results": results}


LAKE = [{"name": "group commit, 100 concurrent small batches", "baseline_s": 2.0, "lake_s": 0.2, "ratio": 10.0,
         "target": ">= 10x"},
        {"name": "  bulk append with fsync vs without (its cost)", "baseline_s": 2.0, "lake_s": 2.5, "ratio": 1.25,
         "target": "-"},
        {"name": "aggregate by env incl. opening the snapshot", "baseline_s": 0.02, "lake_s": 0.04, "ratio": 2.0,
         "target": "<= 1.5x"}]
SFT = {"mode": "lora", "examples": 256, "ratio": 2.5, "ratio_no_shared_prefix": 1.5,
       "ours": {"tokens_per_s": 25000.0}, "trl": {"tokens_per_s": 10000.0},
       "ours_no_shared_prefix": {"tokens_per_s": 15000.0}}
WATCH = {"comparisons": [{"workload": "time per small increment", "baseline": "a new process per increment",
                          "baseline_figure": "10.0 s", "figure": "1.5 s", "ratio": 0.15, "better": "lower",
                          "target": "<= 0.2x"}]}
LEVEL = {"route": "atropos", "groups": 300, "p50_ms": 10.0, "errors": 0, "server_ms_per_group": 5.0}
INGEST_BARE = {  # bench_ingest's own shape (no meta): the date comes from the file, the load from its levels
    "ceiling_ms": {},
    "run_api": [dict(LEVEL, clients=8, groups_per_s=100.0, p99_ms=100.0, e2e_groups_per_s=20.0, load=[0.5, 0, 0]),
                dict(LEVEL, clients=8, groups_per_s=300.0, p99_ms=300.0, e2e_groups_per_s=20.0, load=[0.7, 0, 0])],
    "lake": [dict(LEVEL, clients=8, groups_per_s=100.0, p99_ms=100.0, e2e_groups_per_s=100.0, load=[2.0, 0, 0])],
    "native": [dict(LEVEL, clients=8, groups_per_s=150.0, p99_ms=50.0, e2e_groups_per_s=None, load=[1.0, 0, 0])]}


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    (d / "lake.json").write_text(json.dumps(wrap("lake", LAKE)))
    (d / "sft.json").write_text(json.dumps(wrap("sft", SFT, machine="16 cores, Other CPU, Linux 6.1")))
    (d / "watch.json").write_text(json.dumps(wrap("watch", WATCH)))
    (d / "ingest.json").write_text(json.dumps(INGEST_BARE))
    (d / "unknown.json").write_text(json.dumps(wrap("unknown", {"x": 1})))  # no reader, no comparisons: skipped
    return d


def table_rows(text):
    return [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")]


def test_one_row_per_comparison_with_baseline_figures_ratio_target_and_context(results):
    rows, machines = report.collect(results)
    assert [r.bench for r in rows] == ["lake"] * 3 + ["ingest"] * 4 + ["sft"] * 2 + ["watch"]
    assert machines == [META["machine"], "not recorded", "16 cores, Other CPU, Linux 6.1"]
    lines = report.markdown_table(rows)
    assert lines[2] == ("| group commit, 100 concurrent small batches (`bench_lake`) | one Delta commit per batch | 2.00 s | "
                        "200 ms | **10.00x** | >= 10x: met | 2026-12-03 12:00 UTC, M1, load 0.5-1.2 |")
    assert "| 2.00 s | 2.50 s | **1.25x** |  |" in lines[3]  # no target: nothing checked
    assert "**2.00x** | <= 1.5x: **missed**" in lines[4]  # a bound from above, missed
    ingest = [line for line in lines if "`bench_ingest`" in line]
    # run-api is the mean of its two runs (200 groups/s, p99 200 ms): ack 0.5x missed, p99 0.5x met, e2e 5x met
    assert "| durable ack of Atropos groups, 8 clients (`bench_ingest`)" in ingest[0]
    assert "200 groups/s | 100 groups/s | **0.50x** | >= 1.0x: **missed**" in ingest[0]
    assert "| 200 ms | 100 ms | **0.50x** | <= 1.0x: met" in ingest[1]
    assert "| 20.0 groups/s | 100 groups/s | **5.00x** | >= 5x: met" in ingest[2]
    assert "the Atropos route on the same server | 100 groups/s | 150 groups/s | **1.50x** | >= 1.0x: met" in ingest[3]
    assert ingest[0].endswith("M2, load 0.5-2.0 |")  # loads from the levels; the machine was not recorded
    assert "| plain TRL SFTTrainer | 10,000 tok/s | 25,000 tok/s | **2.50x** | >= 1.0x: met | 2026-12-03 12:00 UTC, M3," \
        in lines[9]
    assert "| a new process per increment | 10.0 s | 1.5 s | **0.15x** | <= 0.2x: met |" in lines[-1]


def test_times_better_reads_the_ratio_either_way():
    faster = report.Row("x", "w", "b", "", "", 4.0, "higher", ">= 2x")
    costlier = report.Row("x", "w", "b", "", "", 4.0, "lower", "<= 2x")
    assert faster.times_better() == 4.0 and faster.met() is True
    assert costlier.times_better() == 0.25 and costlier.met() is False
    assert report.Row("x", "w", "b", "", "", None).met() is None
    assert report.Row("x", "w", "b", "", "", 3.0, target="lake command < 1 s").met() is None


PAGE = """# Title

Intro text.

## Benchmarks

Hand-written context stays.

<!-- bench:begin -->
| old | table |
|---|---|
| typed | by hand |
<!-- bench:end -->

What limits the missed targets: stays too.
"""


def test_report_file_png_and_results_page_between_markers(results, tmp_path):
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text(PAGE)
    out = tmp_path / "REPORT.md"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(results), "--out", str(out),
                          "--update-docs", "--page", str(page), "--learning", str(tmp_path / "absent.md")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert len(table_rows(text)) == 10
    assert "Machines: M1 = 2 cores, Test CPU, Linux 6.1; M2 = not recorded; M3 = 16 cores, Other CPU" in text
    png = tmp_path / "report_ratios.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "](report_ratios.png)" in text
    new = page.read_text()
    assert "typed | by hand" not in new
    before, between, after = new.partition("<!-- bench:begin -->")[0], *new.partition("<!-- bench:begin -->")[2].split(
        "<!-- bench:end -->")
    assert before == PAGE.split("<!-- bench:begin -->")[0]
    assert after == PAGE.split("<!-- bench:end -->")[1]
    assert table_rows(between) == table_rows(text)
    assert "do not edit by hand" in between
    # run again: the same page (the markers stay, nothing accumulates)
    subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(results), "--out", str(out),
                    "--update-docs", "--page", str(page), "--learning", str(tmp_path / "absent.md")], check=True,
                   capture_output=True)
    assert page.read_text().count("<!-- bench:begin -->") == 1
    assert table_rows(page.read_text()) == table_rows(text)


def test_page_without_markers_is_a_one_line_error(results, tmp_path):
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# no markers\n")
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(results), "--out",
                          str(tmp_path / "R.md"), "--update-docs", "--page", str(page)], capture_output=True,
                         text=True)
    assert res.returncode == 1 and "markers" in res.stderr and "Traceback" not in res.stderr
    assert page.read_text() == "# no markers\n"


def test_no_results_is_a_one_line_error(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(tmp_path), "--out",
                          str(tmp_path / "R.md")], capture_output=True, text=True)
    assert res.returncode == 1 and "just bench" in res.stderr and "Traceback" not in res.stderr


LEARNING = """# Learning: the guide's four strategies (full run, model tiny)

Generated by `python bench/learning.py` on 2026-12-03 14:40 UTC; 2 cores, Test CPU; load 1.00 at the start.

Seeds 3; figures are means.

| strategy | arm | measure (held-out) | before | after | after - before |
|---|---|---|---|---|---|
| 1 SFT from lake trajectories | 1200 steps | bash test success | 0.000 ± 0.000 | 0.070 ± 0.020 | 0.070 ± 0.020 |

Curves (held-out success against steps, seeds' band; held-out loss beside it): [learning_sft.png](learning_sft.png)

Raw records (every run, seed and step): learning.json.
"""


def test_learning_table_copied_between_its_markers_with_curves_named(results, tmp_path):
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text(PAGE + "\n## Learning\n<!-- learning:begin -->\nold | typed\n<!-- learning:end -->\ntail\n")
    (tmp_path / "learning").mkdir()
    (tmp_path / "learning" / "LEARNING.md").write_text(LEARNING)
    args = [sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(results), "--out",
            str(tmp_path / "R.md"), "--update-docs", "--page", str(page), "--learning",
            str(tmp_path / "learning" / "LEARNING.md")]
    subprocess.run(args, check=True, capture_output=True)
    new = page.read_text()
    between = new.split("<!-- learning:begin -->")[1].split("<!-- learning:end -->")[0]
    assert "old | typed" not in new and new.endswith("<!-- learning:end -->\ntail\n")
    assert "| 1 SFT from lake trajectories | 1200 steps | bash test success |" in between
    assert "2026-12-03 14:40 UTC" in between and "`learning/learning_sft.png`" in between
    assert "`learning/LEARNING.md`" in between and "](" not in between  # named, not linked: outside docs/
    subprocess.run(args, check=True, capture_output=True)  # again: nothing accumulates
    assert page.read_text() == new


def test_smollm2_learning_table_copied_between_its_own_markers(results, tmp_path):
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text(PAGE + "\n<!-- learning:begin -->\n<!-- learning:end -->\n"
                    "<!-- learning-smollm2:begin -->\nold\n<!-- learning-smollm2:end -->\n")
    (tmp_path / "learning" / "smollm2").mkdir(parents=True)
    (tmp_path / "learning" / "LEARNING.md").write_text(LEARNING)
    (tmp_path / "learning" / "smollm2" / "LEARNING.md").write_text(
        LEARNING.replace("model tiny", "model smollm2").replace("14:40 UTC", "16:30 UTC").replace("0.070", "0.225"))
    subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--results", str(results), "--out",
                    str(tmp_path / "R.md"), "--update-docs", "--page", str(page), "--learning",
                    str(tmp_path / "learning" / "LEARNING.md"), "--learning-smollm2",
                    str(tmp_path / "learning" / "smollm2" / "LEARNING.md")], check=True, capture_output=True)
    new = page.read_text()
    tiny = new.split("<!-- learning:begin -->")[1].split("<!-- learning:end -->")[0]
    smol = new.split("<!-- learning-smollm2:begin -->")[1].split("<!-- learning-smollm2:end -->")[0]
    assert "0.070" in tiny and "0.225" not in tiny
    assert "0.225" in smol and "16:30 UTC" in smol and "old" not in smol
    assert "`learning/smollm2/learning_sft.png`" in smol
