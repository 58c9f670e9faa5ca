"""The figures a run and the demo write: the loss curve (loss.png) and before/after evaluation bars.

Each figure is built by a function that returns the matplotlib Figure, so tests check what is plotted (the
last step is on the curve, a zero bar carries its "0.00" label) rather than pixels; `write_*` saves it. Numbers a
reader needs are written on the figure: the first and last loss, every bar's value. Axis ticks are plain numbers
("7", "0.5"), never matplotlib's "7x10^0" of a log axis; step axes have whole-number ticks (no "2.5" step). The
loss axis names the loss the run minimised (SFT's token cross-entropy, DPO's preference loss, online RL's
policy-gradient loss), a curve that is 0 throughout says so in the title (online RL's loss is 0 when no group
had a signal), and end-of-line labels are moved apart so close values stay readable.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server, and no GUI backend import cost
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from ground.jsonl import read_jsonl  # noqa: E402

LOG_SCALE_RATIO = 10  # a loss falling more than 10x is drawn on a log axis, else a linear one shows the shape better
FEW_POINTS = 30  # below this many logged steps every point gets a marker (one point alone is no line at all)
SFT_LOSS = "train loss (assistant tokens)"
# the loss each run method minimises (RunFolder's method): its y-axis label
LOSS_LABELS = {"dpo": "DPO preference loss", "online": "policy-gradient loss (GRPO)",
               "transfer-online": "policy-gradient loss (GRPO)"}
LABEL_GAP_PX = 12  # end labels closer than this (at dpi 100, ~9 pt) are moved apart


def loss_label(method: str | None) -> str:
    return LOSS_LABELS.get(method or "", SFT_LOSS)


def spread(ys: list[float], gap: float) -> list[float]:
    """Positions as near `ys` as possible, in the same order, at least `gap` apart (a bottom-up pass, then the
    group shifted down by half its overshoot so labels stay centred on their lines)."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out = [0.0] * len(ys)
    prev = None
    for i in order:
        out[i] = ys[i] if prev is None else max(ys[i], prev + gap)
        prev = out[i]
    if order:
        shift = (sum(out) - sum(ys)) / len(ys)
        out = [y - shift for y in out]
    return out


def end_labels(fig: Figure, ax, items: list[tuple[float, float, str, object]], dx_points: float = 6) -> list:
    """Label each (x, y, text, color) at its point, moved up or down so no two labels overlap. Returns the
    annotations. Positions are computed on the laid-out figure (call after tight_layout)."""
    if not items:
        return []
    fig.canvas.draw()
    px = [ax.transData.transform((x, y))[1] for x, y, _, _ in items]
    target = spread(px, LABEL_GAP_PX)
    points = 72 / fig.dpi
    return [ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx_points, (t - p) * points), fontsize=8,
                        color=color, va="center", annotation_clip=False)
            for (x, y, text, color), p, t in zip(items, px, target)]


def plain_number(value: float, _pos=None) -> str:
    """7 -> "7", 0.5 -> "0.5", 0.0312 -> "0.0312": a tick label without an exponent."""
    return f"{value:.4g}" if value else "0"


def loss_points(log_path: Path) -> tuple[list[int], list[float]]:
    """(steps, losses) of a train_log.jsonl, every logged step including the last."""
    steps, losses = [], []
    for rec in read_jsonl(log_path)[0]:
        if "step" in rec and rec.get("loss") is not None:
            steps.append(int(rec["step"]))
            losses.append(float(rec["loss"]))
    return steps, losses


def loss_figure(steps: list[int], losses: list[float], title: str = "loss", ylabel: str = SFT_LOSS) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    few = len(steps) < FEW_POINTS
    ax.plot(steps, losses, lw=1.5, marker="o" if few else None, ms=4)
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if losses and all(v == 0 for v in losses):  # a flat line at 0 looks like a plotting failure: say what it is
        title += " (loss 0 at every logged step: no gradient signal)"
    positive = [v for v in losses if v > 0]
    if positive and max(positive) / min(positive) > LOG_SCALE_RATIO:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 0.1 0.2 0.5 1 2 5: enough labels to read off
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_minor_formatter(NullFormatter())  # minor log ticks unlabelled: they crowd the axis
    if steps:  # the first and last values, on a white box so the curve does not run through them
        box = dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8)
        ax.annotate(f"{losses[0]:.3g}", (steps[0], losses[0]), textcoords="offset points", xytext=(8, -2), ha="left",
                    va="top", fontsize=8, bbox=box)
        if len(steps) > 1:
            ax.annotate(f"step {steps[-1]}: {losses[-1]:.3g}", (steps[-1], losses[-1]), textcoords="offset points",
                        xytext=(0, 14), ha="right", va="bottom", fontsize=8, bbox=box)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _save(fig: Figure, png: Path) -> Path:
    fig.savefig(png)
    plt.close(fig)
    return png


def write_loss_plot(log_path: Path, png: Path, title: str = "loss", method: str | None = None) -> Path | None:
    """loss.png of a run's log, the y-axis named for the run's `method` (loss_label); None when nothing was logged."""
    steps, losses = loss_points(log_path)
    if not steps:
        return None
    return _save(loss_figure(steps, losses, title, loss_label(method)), png)


EVAL_METRICS = (("success_rate", "success"), ("mean_reward", "mean reward"), ("valid_tool_call_rate", "valid tool call"))


def eval_bars_figure(before: dict, after: dict, after_label: str) -> Figure:
    """Before/after bars of an evaluation's rates, each with its value written above it. A rate of 0 has no
    bar to see, so the axis starts just below 0 and the bar's edge and its "0.00" label stay visible."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    xs = range(len(EVAL_METRICS))
    for shift, result, label in ((-0.2, before, "before"), (0.2, after, after_label)):
        values = [float(result[k]) for k, _ in EVAL_METRICS]
        bars = ax.bar([x + shift for x in xs], values, 0.4, label=label, edgecolor="black", linewidth=0.8)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=2, fontsize=8)
        zeros = [x + shift for x, v in zip(xs, values) if v == 0]
        if zeros:  # a flat stroke in the bar's colour where a bar has no height to show
            ax.plot(zeros, [0.0] * len(zeros), ls="none", marker="_", ms=22, mew=4, color=bars.patches[0].get_facecolor())
    ax.set_xticks(list(xs), [name for _, name in EVAL_METRICS])
    ax.set_ylim(-0.03, 1.12)
    ax.axhline(0, color="black", lw=0.6)
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.set_title(f"{before['env']} {before['split']} split, {before['episodes']} tasks", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def write_eval_plot(before: dict, after: dict, after_label: str, png: Path) -> Path:
    return _save(eval_bars_figure(before, after, after_label), png)


def eval_curve_figure(evals: list[dict], train: list[tuple[int, float]], title: str = "online RL",
                      signal: list[tuple[int, float]] = ()) -> Figure:
    """Held-out evaluation over training steps (success rate, mean reward, valid tool calls: one point per
    evaluation, the last value written at each line's end, apart when lines coincide) and the training rollouts'
    mean return per step, faint, behind them, with the fraction of groups that had a signal (returns not all
    equal: trainers/rl/curriculum.py). The legend sits below the axes, clear of lines at 0 and 1."""
    fig, ax = plt.subplots(figsize=(6.5, 4.0), dpi=100)
    if train:
        ax.plot([s for s, _ in train], [r for _, r in train], lw=0.8, alpha=0.35, color="grey",
                label="train rollouts: mean return")
    if signal:
        ax.plot([s for s, _ in signal], [f for _, f in signal], lw=0.8, alpha=0.5, color="tab:purple", ls="-.",
                label="train groups with a signal")
    steps = [int(e["step"]) for e in evals]
    ends = []
    for i, (key, name) in enumerate(EVAL_METRICS):
        values = [float(e[key]) for e in evals]
        # dashed and dotted: success and mean reward are often equal (a 0/1 reward) and would hide each other
        line, = ax.plot(steps, values, marker="o", ms=4, lw=1.5, ls=("-", "--", ":")[i], label=f"test {name}")
        if values:
            ends.append((steps[-1], values[-1], f"{values[-1]:.2f}", line.get_color()))
    if evals and all(float(e["success_rate"]) == 0 for e in evals):
        title += " (test success 0 at every evaluation)"
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if steps:  # room on the right for the end labels, above 1 for a line at 1
        ax.set_xlim(right=steps[-1] + max(1, steps[-1]) * 0.12)
    ax.set_ylim(top=max([1.1] + [r * 1.05 for _, r in train]))
    ax.set_xlabel("training step (policy version)")
    ax.set_ylabel("rate / reward")
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.axhline(0, color="black", lw=0.6)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    end_labels(fig, ax, ends)  # after the layout: apart on the figure as saved
    return fig


def write_eval_curve(evals: list[dict], train: list[tuple[int, float]], png: Path, title: str = "online RL",
                     signal: list[tuple[int, float]] = ()) -> Path:
    return _save(eval_curve_figure(evals, train, title, signal), png)
