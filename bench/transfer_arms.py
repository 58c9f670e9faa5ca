"""Transfer on a finer step grid: does the source SFT model reach a target success level in half the steps?

bench/learning.py's strategy 3 scores each arm only at its end (24 steps at --size cpu). There, with transfer the
success level 0.05 was reached at step 0 in one seed and at step 24 in the other, without transfer at 24 in both,
so issue 24's "reaches a success level in <= 0.5x the steps of no transfer" could only read as one seed of two.
Here the same two arms (strategies.py's strategy_transfer and strategy_no_transfer: `rl_transfer_init
--freeze_layers 0-8` + `rl_train_transfer --method sft`, against `rl_finetune_supervised` of the same base on the
same git rows with the same lr, batch and steps) are scored at several step counts, each point a finished run of
that many steps, from one bash SFT model, several seeds. The source and the base are scored once (greedy: the same
for every seed). Steps to each success level in --levels are given per seed, with their ratio.

Any pair of environments: `--source-env web_click_env --target-env web_fill_env` is the web pattern (the click
tasks of web_form_env as the source, its field-filling tasks as the related target; bench/transfer_arms/smollm2_web).

    python bench/transfer_arms.py --model smollm2 --source RUN  # RUN: a bash SFT run (rl_finetune_supervised)
    python bench/transfer_arms.py --model smollm2               # trains that source first (48 steps, learning.py)
    python bench/transfer_arms.py --quick                       # tiny model, a few steps: checks that it runs
    python bench/transfer_arms.py --model smollm2 --source-env web_click_env --target-env web_fill_env \
        --source-steps 12 --steps 3 6 12 --batch 4 --micro-batch 2 --lr 2e-3 --limit 22 --levels 0.2 0.3 0.4
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
from harness import (BASH, GIT, ROOT, Commands, band, by, earlier_records, first_step_at, fmt_ci, pool, time_spent,
                     work_folder, work_options)
from strategies import (NO_TRANSFER, PRETRAINED, SIZES, strategy_no_transfer, strategy_sft, strategy_transfer,
                        transfer_arm)

LEVELS = (0.05, 0.10, 0.15)  # git test success: 5, 10, 15 of 100 tasks (--levels for other targets)


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


def earlier_baseline(path: Path, size, target: str) -> list[dict]:
    """The no-transfer records of an earlier transfer.json, checked to be of the same target, data and size (the
    base trained on the same target rows does not depend on the source)."""
    keys = ("transfer_steps", "transfer_batch", "transfer_lr", "git_expert", "eval_limit", "seeds")
    return earlier_records(
        path, "--baseline-from", lambda was: {"target_env": (was["target_env"], target),
                                              **{k: (was["size"][k], v) for k, v in asdict(size).items() if k in keys}},
        lambda r: r["arm"] == NO_TRANSFER, size.seeds)[1]


def table(records: list[dict], size, arms: list[str], target: str, levels: tuple) -> list[str]:
    seeds = sorted({r["seed"] for r in records})
    steps = [0, *size.transfer_steps]
    head = ["arm", *(f"step {k}" for k in steps)]
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for arm in arms:
        rows.append("| " + " | ".join([arm, *(fmt_ci([r["success"] for r in by(records, arm=arm, step=k)])
                                              for k in steps)]) + " |")
    rows += ["", f"Steps to {target} test success >= level, per seed ({', '.join(map(str, seeds))}; '-': not within "
                 f"{steps[-1]} steps), and transfer's steps over no transfer's (<= 0.5: the issue's target):", "",
             "| level | " + " | ".join(arms) + " | ratio per seed |", "|---|---|---|---|"]
    for level in levels:
        t, n = (steps_to(records, a, seeds, level) for a in arms)
        ratio = [ratio_of(a, b, steps[-1]) for a, b in zip(t, n)]
        fmt = lambda xs: ", ".join("-" if x is None else str(x) for x in xs)  # noqa: E731
        rows.append(f"| {level:.2f} | {fmt(t)} | {fmt(n)} | {', '.join(ratio)} |")
    return rows


def plot(records: list[dict], arms: list[str], out: Path, seeds: int, target: str, levels: tuple) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.9))
    for i, arm in enumerate(arms):
        steps = sorted({r["step"] for r in by(records, arm=arm)})
        pts = [band([r["success"] for r in by(records, arm=arm, step=k)], rate=True) for k in steps]
        line, = ax.plot(steps, [p[0] for p in pts], marker="os"[i], linestyle=["-", "--"][i], label=arm)
        ax.fill_between(steps, [p[1] for p in pts], [p[2] for p in pts], color=line.get_color(), alpha=0.2)
    for level in levels:
        ax.axhline(level, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlabel(f"{target} SFT steps (each point: a run of that many steps)")
    ax.set_ylabel(f"{target} test success (greedy)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, f"mean of {seeds} seeds, band: 95% t-interval", fontsize=7, color="grey")
    fig.tight_layout()
    path = out / "transfer_curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def source_about(args, size) -> str:
    if args.source:
        return f" ({args.source.name})"
    batch = f"{size.sft_batch} chats" if size.sft_batch else "rl_finetune_supervised's default batch"
    lr = f"lr {size.sft_lr}" if size.sft_lr else "its default lr"
    return f" ({size.sft_steps[-1]} steps of {batch} at {lr} on {size.bash_expert} expert rollouts)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a model folder")
    ap.add_argument("--source", type=Path, help="the source SFT run folder both arms compare against (default: train "
                                                 "one on the source's expert rollouts, learning.py's strategy 1)")
    ap.add_argument("--source-env", default=BASH, help=f"the source environment (default {BASH})")
    ap.add_argument("--target-env", default=GIT, help=f"the target environment (default {GIT})")
    ap.add_argument("--source-steps", type=int, help="SFT steps of the source model trained here (default 48)")
    ap.add_argument("--batch", type=int, help="conversations per target SFT step, both arms (default 4)")
    ap.add_argument("--micro-batch", type=int,
                    help="conversations per forward pass, both arms and the source (default: the whole batch)")
    ap.add_argument("--lr", type=float, help="the target SFT learning rate, both arms (default 1e-3)")
    ap.add_argument("--freeze", help="the transfer arm's --freeze_layers (default 0-8, the guide's; an empty string: "
                                     "the embeddings only)")
    ap.add_argument("--adapter", choices=("continue", "fresh"), default="continue",
                    help="the transfer arm's rl_transfer_init --adapter (fresh: a new adapter over the merged source)")
    ap.add_argument("--baseline-from", type=Path,
                    help="an earlier transfer.json of the same target, data, steps, seeds and size: its no-transfer "
                         "arm is taken from there instead of trained again")
    ap.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                    help="target test success levels whose steps are compared (default 0.05 0.10 0.15)")
    ap.add_argument("--quick", action="store_true", help="tiny model, a few steps and tasks: checks that it runs")
    ap.add_argument("--seeds", type=int, help="seeds per arm (default 3)")
    ap.add_argument("--steps", type=int, nargs="+", help="the step counts scored (default 4 8 12 24)")
    ap.add_argument("--limit", type=int, help="target test tasks per evaluation (default 100)")
    ap.add_argument("--jobs", type=int, default=2, help="commands side by side (default 2)")
    ap.add_argument("--out", type=Path, help="where the table and records go (default bench/transfer_arms/<model>)")
    work_options(ap)
    args = ap.parse_args()
    model = "tiny" if args.quick else args.model
    size = size_for(model, args.quick, args.seeds, tuple(args.steps) if args.steps else None, args.limit)
    size = replace(size, jobs=args.jobs, **{k: v for k, v in (("transfer_batch", args.batch), ("transfer_lr", args.lr),
                                                               ("sft_steps", args.source_steps and (args.source_steps,)))
                                            if v})
    size = size if args.freeze is None else replace(size, freeze=args.freeze)
    # a step in passes of --micro-batch: the target arms' (rl_train_transfer / strategy_no_transfer take it) and the
    # source's (strategy_sft passes sft_batch as --batch-size, so it gets the pass and a --grad-accum)
    target_pass = min(args.micro_batch or size.transfer_batch, size.transfer_batch)
    source_pass = min(args.micro_batch or size.sft_batch, size.sft_batch) if size.sft_batch else None
    if size.transfer_batch % target_pass or (source_pass and size.sft_batch % source_pass):
        ap.error(f"--micro-batch {args.micro_batch} must divide --batch ({size.transfer_batch}) and the source's "
                 f"batch ({size.sft_batch})")
    accum = size.sft_batch // source_pass if source_pass else 1
    src, dst, levels = args.source_env, args.target_env, tuple(args.levels)
    out = args.out or ROOT / "bench" / "transfer_arms" / ("quick" if args.quick else Path(model).name)
    out.mkdir(parents=True, exist_ok=True)
    baseline = earlier_baseline(args.baseline_from, size, dst) if args.baseline_from else None
    work = work_folder(args, ap, "lachesis-transfer-")
    c = Commands(work, model, resume=args.resume)
    load0, t0 = os.getloadavg()[0], time.time()
    print(f"transfer arms {src} -> {dst}: model {model}, {size.seeds} seeds, steps {size.transfer_steps}, work {work}",
          flush=True)
    micro = ("--micro_batch", args.micro_batch) if args.micro_batch else ()
    try:
        lake = work / "lake_target"
        c.run("lake", "init", "--lake", lake, log="init-target")
        c.run("lake", "rollout", "--env", dst, "--policy", "expert", "--episodes", size.git_expert, "--lake", lake,
              log="rollout-target")
        if args.source:
            source = args.source.resolve()
        else:
            source_lake = work / "lake_source"
            c.run("lake", "init", "--lake", source_lake, log="init-source")
            c.run("lake", "rollout", "--env", src, "--policy", "expert", "--episodes", size.bash_expert, "--lake",
                  source_lake, log="rollout-source")
            source = Path(strategy_sft(c, replace(size, sft_batch=source_pass), source_lake, 0, env=src,
                                       extra=("--grad-accum", accum) if accum > 1 else ())[-1]["run"])
        source_eval, base_eval = pool(size.jobs, [lambda: c.evaluate(dst, size.eval_limit, source, log="eval-source"),
                                                  lambda: c.evaluate(dst, size.eval_limit, None, log="eval-base")])
        seeds = range(size.seeds)
        jobs = [f for sd in seeds for f in (
            lambda sd=sd: strategy_transfer(c, size, lake, sd, source, size.freeze, source_eval=source_eval,
                                            source_env=src, target_env=dst, extra=micro, adapter=args.adapter),
            *([] if baseline else [
                lambda sd=sd: strategy_no_transfer(c, size, lake, sd, env=dst, micro_batch=args.micro_batch)]))]
        records = [r for rs in pool(size.jobs, jobs) for r in rs] + (baseline or [])
        if not baseline:  # (an earlier run's no-transfer arm has its step 0 already)
            records += [{"strategy": "transfer", "arm": NO_TRANSFER, "seed": sd, "step": 0, "run": "base", **base_eval}
                        for sd in seeds]
        spent = time_spent(t0, c.logs)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    for r in records:
        r["run"] = r["run"] if not r["run"].startswith(str(work)) else str(Path(r["run"]).relative_to(work))
    arms = [transfer_arm(size.freeze, args.adapter), NO_TRANSFER]
    load1 = os.getloadavg()[0]
    (out / "transfer.json").write_text(json.dumps({"size": asdict(size), "model": model, "source": str(source),
                                                   "source_env": src, "target_env": dst, "levels": levels, "machine": machine(), "load": [load0, load1],
                                                   "records": records, **spent}, indent=1))
    png = plot(records, arms, out, size.seeds, dst, levels)
    flags = " --quick" if args.quick else f" --model {model}{' --source RUN' if args.source else ''}"
    flags += "".join(f" --{k} {v}" for k, v in (("source-env", src if src != BASH else None),
                                                ("target-env", dst if dst != GIT else None),
                                                ("source-steps", args.source_steps), ("seeds", args.seeds),
                                                ("limit", args.limit), ("batch", args.batch),
                                                ("micro-batch", args.micro_batch), ("lr", args.lr)) if v)
    flags += f" --freeze '{args.freeze}'" if args.freeze is not None else ""
    flags += f" --adapter {args.adapter}" if args.adapter != "continue" else ""
    flags += " --baseline-from EARLIER" if args.baseline_from else ""
    flags += f" --steps {' '.join(map(str, args.steps))}" if args.steps else ""
    flags += f" --levels {' '.join(map(str, levels))}" if levels != LEVELS else ""
    took = (f"resumed: the commands' own times sum to {spent['commands_s'] / 60:.0f} min" if args.resume else
            f"{spent['total_s'] / 60:.0f} min, {spent['cpu_s'] / 60:.0f} CPU-min")
    lines = [f"# Transfer {src} -> {dst} on a step grid ({model})", "",
             f"Generated by `python bench/transfer_arms.py{flags}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute load {load0:.2f} at the start, "
             f"{load1:.2f} at the end; {took}.", "",
             f"{dst} test success (greedy, the first {size.eval_limit} tasks of its test split) after k SFT "
             f"steps of {size.transfer_batch} expert chats of {dst} (from {size.git_expert} rollouts) at lr "
             f"{size.transfer_lr}: from the {src} SFT model{source_about(args, size)} with the embeddings"
             f"{f' and layers {size.freeze}' if size.freeze else ''} frozen (step 0: the source itself), and from "
             f"the base model without transfer (step 0: the base"
             f"{f'; its records from {args.baseline_from}, the same target rows, steps and seeds' if args.baseline_from else ''}"
             f"); means with a 95% t-interval over {size.seeds} seeds.", "",
             *table(records, size, arms, dst, levels), "",
             f"Curve: [{png.name}]({png.name}). Raw records: transfer.json."]
    (out / "TRANSFER.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
