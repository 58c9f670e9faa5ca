"""The figures: what is plotted, not pixels. The last step is on the loss curve, a one-step run still shows its
point, tick labels are plain numbers on a log axis too, zero bars carry a visible label."""
from __future__ import annotations

import re

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)
from trainers.runtime.plots import eval_bars_figure, loss_figure, loss_points, plain_number


def _tick_texts(fig) -> list[str]:
    fig.canvas.draw()
    ax = fig.axes[0]
    return [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]


def test_loss_curve_ends_at_the_last_step_of_a_run(tiny_dir, tmp_path):
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    summary = run_sft(SFTConfig(model=str(tiny_dir), data=str(th.write_jsonl(tmp_path / "d.jsonl", th.tool_chats(8))),
                                output=str(tmp_path / "run"), max_steps=7, log_every=5, batch_size=4,
                                record_in_lake=False, progress=False))
    steps, losses = loss_points(tmp_path / "run" / "train_log.jsonl")
    assert steps == [1, 5, 7]  # step 1, every 5th, and the last (7 is not a multiple of 5)
    fig = loss_figure(steps, losses)
    assert list(fig.axes[0].lines[0].get_xdata()) == [1, 5, 7]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert f"step 7: {losses[-1]:.3g}" in texts and f"{losses[0]:.3g}" in texts  # the numbers a reader wants
    assert summary["loss_plot"] and (tmp_path / "run" / "loss.png").stat().st_size > 1000


def test_a_one_step_run_still_shows_its_point():
    fig = loss_figure([1], [6.93])
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [1] and line.get_marker() not in (None, "None", "")


def test_tick_labels_are_plain_numbers_on_a_log_axis():
    assert [plain_number(v) for v in (7.0, 0.5, 0.0312, 0.0, 20.0)] == ["7", "0.5", "0.0312", "0", "20"]
    fig = loss_figure(list(range(1, 101)), [7.0 * 0.95 ** i for i in range(100)])  # 7 -> 0.04: log axis
    assert fig.axes[0].get_yscale() == "log"
    labels = _tick_texts(fig)
    assert labels and all(re.fullmatch(r"[0-9.]+", t) for t in labels), labels  # no "7x10^0", no mathtext
    flat = loss_figure([1, 2, 3], [7.0, 6.9, 6.95])  # a short flat run: linear axis, still plain
    assert flat.axes[0].get_yscale() == "linear" and all(re.fullmatch(r"[0-9.]+", t) for t in _tick_texts(flat))


def test_zero_bars_are_labelled_and_visible():
    before = {"env": "bash_exec_env", "split": "test", "episodes": 3, "success_rate": 0.0, "mean_reward": 0.0,
              "valid_tool_call_rate": 0.0}
    after = {**before, "success_rate": 0.33, "mean_reward": 0.25, "valid_tool_call_rate": 1.0}
    fig = eval_bars_figure(before, after, "after SFT (10 steps)")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["0.00", "0.00", "0.00", "0.33", "0.25", "1.00"]
    assert ax.get_ylim()[0] < 0  # a bar of height 0 sits above the axis bottom, its edge drawn
    assert all(p.get_linewidth() > 0 for p in ax.patches)
    strokes = [ln for ln in ax.lines if ln.get_marker() == "_"]  # one stroke per zero bar, none for the others
    assert [list(ln.get_xdata()) for ln in strokes] == [[-0.2, 0.8, 1.8]]
