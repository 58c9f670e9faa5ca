"""Transfer bash -> git on a finer step grid: does the bash SFT model reach a git success level in half the steps?

bench/learning.py's strategy 3 scores each arm only at its end (24 steps at --size cpu). There, with transfer the
success level 0.05 was reached at step 0 in one seed and at step 24 in the other, without transfer at 24 in both,
so issue 24's "reaches a success level in <= 0.5x the steps of no transfer" could only read as one seed of two.
Here the same two arms (strategies.py's strategy_transfer and strategy_no_transfer: `rl_transfer_init
--freeze_layers 0-8` + `rl_train_transfer --method sft`, against `rl_finetune_supervised` of the same base on the
same git rows with the same lr, batch and steps) are scored at several step counts, each point a finished run of
that many steps, from one bash SFT model, several seeds. The source and the base are scored once (greedy: the same
for every seed). Steps to each success level in LEVELS are given per seed, with their ratio.

    python bench/transfer_arms.py --model smollm2 --source RUN  # RUN: a bash SFT run (rl_finetune_supervised)
    python bench/transfer_arms.py --model smollm2               # trains that source first (48 steps, learning.py)
    python bench/transfer_arms.py --quick                       # tiny model, a few steps: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench_json import machine
from harness import (BASH, GIT, ROOT, Commands, band, by, first_step_at, fmt_ci, pool, time_spent, work_folder,
                     work_options)
from strategies import PRETRAINED, SIZES, strategy_no_transfer, strategy_sft, strategy_transfer

LEVELS = (0.05, 0.10, 0.15)  # git test success: 5, 10, 15 of 100 tasks
TRANSFER = "transfer, layers {} frozen"
NO_TRANSFER = "same base, no transfer"  # strategy_no_transfer's arm


def size_for(model: str, quick: bool, seeds: int | None, steps: tuple | None, limit: int | None):
    size = SIZES["quick"] if quick else replace(SIZES["cpu"], **PRETRAINED, transfer_steps=(4, 8, 12, 24), seeds=3)
    if model == "tiny" and not quick:
        size = SIZES["full"]
    size = replace(size, families=False)  # the source's own bash figures are not the question here
    return replace(size, **{k: v for k, v in (("seeds", seeds), ("transfer_steps", steps), ("eval_limit", limit))
                            if v})


def steps_to(records: list[dict], arm: str, seeds: list[int], level: float) -> list[int | None]:
    return [first_step_at(records, arm, sd, level) for sd in seeds]


def ratio_of(transfer: int | None, base: int | None, last: int) -> str:
    """Transfer's steps to a level over no transfer's; '< x' when only transfer reached it within `last` steps."""
    if transfer is None:
        return "-"
    if base is None:
        return f"< {transfer / last:.2f}"
    return "both at step 0" if base == 0 else f"{transfer / base:.2f}"


def table(records: list[dict], size, arms: list[str]) -> list[str]:
    seeds = sorted({r["seed"] for r in records})
    steps = [0, *size.transfer_steps]
    head = ["arm", *(f"step {k}" for k in steps)]
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for arm in arms:
        rows.append("| " + " | ".join([arm, *(fmt_ci([r["success"] for r in by(records, arm=arm, step=k)])
                                              for k in steps)]) + " |")
    rows += ["", f"Steps to git test success >= level, per seed ({', '.join(map(str, seeds))}; '-': not within "
                 f"{steps[-1]} steps), and transfer's steps over no transfer's (<= 0.5: the issue's target):", "",
             "| level | " + " | ".join(arms) + " | ratio per seed |", "|---|---|---|---|"]
    for level in LEVELS:
        t, n = (steps_to(records, a, seeds, level) for a in arms)
        ratio = [ratio_of(a, b, steps[-1]) for a, b in zip(t, n)]
        fmt = lambda xs: ", ".join("-" if x is None else str(x) for x in xs)  # noqa: E731
        rows.append(f"| {level:.2f} | {fmt(t)} | {fmt(n)} | {', '.join(ratio)} |")
    return rows


def plot(records: list[dict], arms: list[str], out: Path, seeds: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.9))
    for i, arm in enumerate(arms):
        steps = sorted({r["step"] for r in by(records, arm=arm)})
        pts = [band([r["success"] for r in by(records, arm=arm, step=k)], rate=True) for k in steps]
        line, = ax.plot(steps, [p[0] for p in pts], marker="os"[i], linestyle=["-", "--"][i], label=arm)
        ax.fill_between(steps, [p[1] for p in pts], [p[2] for p in pts], color=line.get_color(), alpha=0.2)
    for level in LEVELS:
        ax.axhline(level, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlabel("git SFT steps (each point: a run of that many steps)")
    ax.set_ylabel("git test success (greedy)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, f"mean of {seeds} seeds, band: 95% t-interval", fontsize=7, color="grey")
    fig.tight_layout()
    path = out / "transfer_curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a model folder")
    ap.add_argument("--source", type=Path, help="the bash SFT run folder both arms compare against (default: train "
                                                 "one on bash expert rollouts, learning.py's strategy 1)")
    ap.add_argument("--quick", action="store_true", help="tiny model, a few steps and tasks: checks that it runs")
    ap.add_argument("--seeds", type=int, help="seeds per arm (default 3)")
    ap.add_argument("--steps", type=int, nargs="+", help="the step counts scored (default 4 8 12 24)")
    ap.add_argument("--limit", type=int, help="git test tasks per evaluation (default 100)")
    ap.add_argument("--jobs", type=int, default=2, help="commands side by side (default 2)")
    ap.add_argument("--out", type=Path, help="where the table and records go (default bench/transfer_arms/<model>)")
    work_options(ap)
    args = ap.parse_args()
    model = "tiny" if args.quick else args.model
    size = size_for(model, args.quick, args.seeds, tuple(args.steps) if args.steps else None, args.limit)
    size = replace(size, jobs=args.jobs)
    out = args.out or ROOT / "bench" / "transfer_arms" / ("quick" if args.quick else Path(model).name)
    out.mkdir(parents=True, exist_ok=True)
    work = work_folder(args, ap, "lachesis-transfer-")
    c = Commands(work, model, resume=args.resume)
    load0, t0 = os.getloadavg()[0], time.time()
    print(f"transfer arms: model {model}, {size.seeds} seeds, steps {size.transfer_steps}, work {work}", flush=True)
    try:
        lake = work / "lake_git"
        c.run("lake", "init", "--lake", lake, log="init-git")
        c.run("lake", "rollout", "--env", GIT, "--policy", "expert", "--episodes", size.git_expert, "--lake", lake,
              log="rollout-git")
        if args.source:
            source = args.source.resolve()
        else:
            bash = work / "lake_bash"
            c.run("lake", "init", "--lake", bash, log="init-bash")
            c.run("lake", "rollout", "--env", BASH, "--policy", "expert", "--episodes", size.bash_expert, "--lake",
                  bash, log="rollout-bash")
            source = Path(strategy_sft(c, size, bash, 0)[-1]["run"])
        source_eval, base_eval = pool(size.jobs, [lambda: c.evaluate(GIT, size.eval_limit, source, log="eval-source"),
                                                  lambda: c.evaluate(GIT, size.eval_limit, None, log="eval-base")])
        seeds = range(size.seeds)
        jobs = [f for sd in seeds for f in (
            lambda sd=sd: strategy_transfer(c, size, lake, sd, source, size.freeze, source_eval=source_eval),
            lambda sd=sd: strategy_no_transfer(c, size, lake, sd))]
        records = [r for rs in pool(size.jobs, jobs) for r in rs]
        records += [{"strategy": "transfer", "arm": NO_TRANSFER, "seed": sd, "step": 0, "run": "base", **base_eval}
                    for sd in seeds]
        spent = time_spent(t0, c.logs)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    for r in records:
        r["run"] = r["run"] if not r["run"].startswith(str(work)) else str(Path(r["run"]).relative_to(work))
    arms = [TRANSFER.format(size.freeze), NO_TRANSFER]
    load1 = os.getloadavg()[0]
    (out / "transfer.json").write_text(json.dumps({"size": asdict(size), "model": model, "source": str(source),
                                                   "levels": LEVELS, "machine": machine(), "load": [load0, load1],
                                                   "records": records, **spent}, indent=1))
    png = plot(records, arms, out, size.seeds)
    flags = " --quick" if args.quick else f" --model {model}{' --source RUN' if args.source else ''}"
    flags += "".join(f" --{k} {v}" for k, v in (("seeds", args.seeds), ("limit", args.limit)) if v)
    flags += f" --steps {' '.join(map(str, args.steps))}" if args.steps else ""
    took = (f"resumed: the commands' own times sum to {spent['commands_s'] / 60:.0f} min" if args.resume else
            f"{spent['total_s'] / 60:.0f} min, {spent['cpu_s'] / 60:.0f} CPU-min")
    lines = [f"# Transfer bash -> git on a step grid ({model})", "",
             f"Generated by `python bench/transfer_arms.py{flags}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute load {load0:.2f} at the start, "
             f"{load1:.2f} at the end; {took}.", "",
             f"git test success (greedy, the first {size.eval_limit} tasks of git_repo_env's test split) after k SFT "
             f"steps of {size.transfer_batch} git expert chats (from {size.git_expert} rollouts) at lr "
             f"{size.transfer_lr}: from the bash SFT model with the embeddings and layers {size.freeze} frozen "
             f"(step 0: the source itself), and from the base model without transfer (step 0: the base); means "
             f"with a 95% t-interval over {size.seeds} seeds.", "", *table(records, size, arms), "",
             f"Curve: [{png.name}]({png.name}). Raw records: transfer.json."]
    (out / "TRANSFER.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
