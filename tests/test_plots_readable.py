"""Plots that say what they show (issue 27 item 11): the loss axis names the run's loss (DPO, online RL), steps are
whole numbers, a curve at 0 throughout says so, end labels of close values do not overlap, learning bands stay at
or above 0 (and rates at or below 1), and the bench chart labels each bar with the results table's ratio."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from trainers.runtime.plots import end_labels, eval_curve_figure, loss_figure, loss_label, spread, write_loss_plot

ROOT = Path(__file__).resolve().parent.parent


def _log(path: Path, losses: list[float]) -> Path:
    path.write_text("".join(json.dumps({"step": i + 1, "loss": v}) + "\n" for i, v in enumerate(losses)))
    return path


def test_loss_axis_names_the_methods_loss_and_steps_are_integers(tmp_path):
    import matplotlib.pyplot as plt

    assert "preference" in loss_label("dpo") and "policy-gradient" in loss_label("online")
    assert "policy-gradient" in loss_label("transfer-online") and "assistant tokens" in loss_label("sft")
    fig = loss_figure([1, 2, 3], [0.9, 0.5, 0.4], ylabel=loss_label("dpo"))
    ax = fig.axes[0]
    assert "preference" in ax.get_ylabel()
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)
    png = write_loss_plot(_log(tmp_path / "log.jsonl", [0.0, 0.0, 0.0]), tmp_path / "loss.png", "run", method="online")
    assert png.is_file()


def test_a_flat_zero_curve_says_so_in_the_title():
    import matplotlib.pyplot as plt

    fig = loss_figure([1, 2, 3, 4], [0.0] * 4, title="run x", ylabel=loss_label("online"))
    assert "loss 0 at every logged step" in fig.axes[0].get_title()
    plt.close(fig)
    fig = loss_figure([1, 2], [0.5, 0.0], title="run y")
    assert "at every" not in fig.axes[0].get_title()
    plt.close(fig)
    evals = [{"step": s, "success_rate": 0.0, "mean_reward": 0.1, "valid_tool_call_rate": 0.5} for s in (0, 2, 4)]
    fig = eval_curve_figure(evals, [])
    assert "success 0 at every evaluation" in fig.axes[0].get_title()
    plt.close(fig)


def test_end_labels_of_close_values_do_not_overlap():
    import matplotlib.pyplot as plt

    assert spread([0.0, 1.0, 2.0], 12) == [-11.0, 1.0, 13.0]
    evals = [{"step": s, "success_rate": 0.02, "mean_reward": 0.03, "valid_tool_call_rate": 0.025} for s in (0, 5, 10)]
    fig = eval_curve_figure(evals, [(s, 0.1) for s in range(1, 11)])
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text() in ("0.02", "0.03")]
    assert len(labels) == 3
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not boxes[i].overlaps(boxes[j]), (labels[i].get_text(), labels[j].get_text())
    plt.close(fig)
    fig, ax = plt.subplots()
    assert end_labels(fig, ax, []) == []
    plt.close(fig)


def test_learning_bands_stay_within_what_the_metric_can_be():
    sys.path.insert(0, str(ROOT / "bench"))
    import harness  # noqa: E402  (bench/harness.py)

    m, lo, hi = harness.band([0.05, 0.6], rate=False)  # a loss over 2 seeds: the t-interval reaches far below 0
    assert lo == 0.0 and hi > m > 0
    m, lo, hi = harness.band([0.0, 0.95], rate=True)
    assert lo == 0.0 and hi == 1.0
    assert harness.band([0.3], rate=True) == (0.3, 0.3, 0.3)


def test_bench_chart_labels_are_the_readme_tables_ratios(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import report  # noqa: E402  (bench/report.py)

    rows = [report.Row("watch", "increment resident vs new process", "new process", "7.88 s", "0.64 s", 0.08, "lower",
                       "<= 0.2x"),
            report.Row("sft", "tokens/s", "trl", "100 tok/s", "250 tok/s", 2.5, "higher", ">= 1.5x")]
    for r in rows:
        r.date, r.machine, r.load = "2026-12-04", "2 cores", "1.0"
    assert report.bar_label(rows[0]) == "0.08x (lower is better)"  # the table's ratio, not its inverse 12.5
    fig = report.ratio_figure(rows)
    assert sorted(t.get_text() for ax in fig.axes for t in ax.texts) == sorted(report.bar_label(r) for r in rows)
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert report.plot(rows, tmp_path / "ratios.png").stat().st_size > 0
