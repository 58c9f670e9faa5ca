"""Online RL from one SFT model, several settings side by side: which of them makes the greedy agent better?

bench/learning.py's strategy 2 (SmolLM2, 16 online steps from each seed's SFT model, the default shaped
rewards, lr 2e-4) lowered held-out success in all four runs (0.46 -> 0.24 / 0.29, 0.39 -> 0.23 / 0.20) although
78-97% of the groups had a signal. This script holds the SFT model fixed and changes one thing at a time, through
the commands a user runs (`rl_edit_config` writes each arm's project file, `rl_train_online --init` trains, its own
evaluations on the first `eval_limit` (100) test tasks are the measure), several seeds per arm, each run on its own
copy of the SFT lake (the curriculum's prior reads the lake: runs side by side must not see each other's rollouts).

Arms (ARMS): the learning run's setting; the success-only reward (no step bonus or penalty, no partial credit:
a group then differs only in success, which is what the evaluation scores, where a partial-credit difference of
0.36 got the same normalised advantage as a success); that with trl's "grpo" loss (every episode weighs the same);
and both at the project's default lr 5e-5 with 4 tasks a step instead of 2. Why the last: Adam's first steps move
every weight by about the learning rate whatever the gradient's size, so at 2 tasks a step each update is one
task's group at full size; after 16 such steps the learning-run model had carried the commands of the tasks it
trained on into others (`mkdir -p nizeb && tar xzf hekos_underflow.cfg` for "put hekos_underflow.cfg inside a new
folder nizeb", which it solved with mv before). Last, the grpo arm sampling at temperature 0.5 with lr 1e-4: on
web_form_env the SFT model's samples at 1.0 succeed 0.19-0.34 of the time against 0.50 greedy
(bench/online_arms/smollm2_web), so most of a group's signal there is about sampled mistakes the greedy agent,
the one evaluated, does not make.

    python bench/online_arms.py --model smollm2 --init RUN   # RUN: an SFT run folder (rl_finetune_supervised)
    python bench/online_arms.py --model smollm2              # trains that SFT model first (expert rollouts)
    python bench/online_arms.py --quick                      # tiny model, 2 steps: checks that everything runs
    # one arm, longer, 4 seeds, the end models also scored on the held-out families (bench/online_arms/smollm2_32):
    python bench/online_arms.py --model smollm2 --init RUN --lake LAKE --arms gentle-grpo --steps 32 --seeds 4 --families
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench_json import machine
from harness import (BASH, ROOT, Commands, earlier_records, fmt_ci, pool, run_in_work, time_spent, work_folder,
                     work_options)
from strategies import online_curve

LEARNING_RUN = {"learning_rate": 2e-4, "batch_size": 2}  # bench/learning.py --size cpu: 2 tasks x 4 rollouts a step
SUCCESS_ONLY = {"well_formed_call_bonus": 0, "malformed_call_penalty": 0, "command_error_penalty": 0,
                "partial_credit": 0}
GENTLE = {"learning_rate": 5e-5, "batch_size": 4}  # the project default lr; 4 tasks a step
ARMS = {  # name: (what it is, its lachesis.toml keys)
    "learning-run": ("shaped rewards, lr 2e-4, 2 tasks a step (the learning run)", LEARNING_RUN),
    "success": ("success-only reward, lr 2e-4, 2 tasks a step", {**LEARNING_RUN, **SUCCESS_ONLY}),
    "success-grpo": ("success-only reward, lr 2e-4, 2 tasks a step, grpo loss",
                     {**LEARNING_RUN, **SUCCESS_ONLY, "loss_type": "grpo"}),
    "gentle": ("success-only reward, lr 5e-5, 4 tasks a step", {**GENTLE, **SUCCESS_ONLY}),
    "gentle-grpo": ("success-only reward, lr 5e-5, 4 tasks a step, grpo loss",
                    {**GENTLE, **SUCCESS_ONLY, "loss_type": "grpo"}),
    "cool-grpo": ("success-only reward, lr 1e-4, 4 tasks a step, grpo loss, sampling temperature 0.5",
                  {**GENTLE, **SUCCESS_ONLY, "loss_type": "grpo", "learning_rate": 1e-4, "temperature": 0.5}),
    # issue 45 item 4: from the 120-step web SFT model, cool-grpo's groups of 4 had a signal 0.28 of the time; 8
    # rollouts per task (2 tasks a step: the same 16 episodes) make a group at success p hold a difference with
    # chance 1 - p^8 - (1 - p)^8 instead of 1 - p^4 - (1 - p)^4 (0.90 instead of 0.68 at p = 0.75)
    # issue 45: from the same model with the curriculum's prior read from an evaluation of it on train tasks (its
    # greedy success 0.67 on 100 of them: 15 of 25 families always solved, 5 never), sampling at 1.0 instead of 0.5,
    # so that a family solved at every cool sample may fail sometimes and give a group its difference
    "warm-grpo": ("success-only reward, lr 1e-4, 4 tasks a step, grpo loss, sampling temperature 1.0",
                  {**GENTLE, **SUCCESS_ONLY, "loss_type": "grpo", "learning_rate": 1e-4, "temperature": 1.0}),
    "cool-grpo-g8": ("success-only reward, lr 1e-4, 2 tasks x 8 rollouts a step, grpo loss, sampling temperature 0.5",
                     {**GENTLE, **SUCCESS_ONLY, "loss_type": "grpo", "learning_rate": 1e-4, "temperature": 0.5,
                      "batch_size": 2, "group_size": 8}),
}


@dataclass(frozen=True)
class Size:
    seeds: int
    steps: int
    eval_every: int
    eval_limit: int
    expert: int  # expert rollouts for the SFT model when no --init is given
    sft_steps: int
    sft_lr: float
    sft_batch: int
    micro_batch: int | None
    jobs: int = 2


SIZES = {
    "cpu": Size(seeds=2, steps=16, eval_every=8, eval_limit=100, expert=900, sft_steps=96, sft_lr=2e-3,
                sft_batch=8, micro_batch=1),
    "quick": Size(seeds=2, steps=2, eval_every=1, eval_limit=4, expert=40, sft_steps=4, sft_lr=2e-3,
                  sft_batch=4, micro_batch=None),
}


def sft_model(c: Commands, size: Size, lake: Path, env: str) -> Path:
    """The SFT model every arm starts from: expert rollouts in `lake`, rl_finetune_supervised on its sft view."""
    c.run("lake", "rollout", "--env", env, "--policy", "expert", "--episodes", size.expert, "--lake", lake,
          log=f"rollout-{env}")
    run = c.work / "sft"
    c.run("rl_finetune_supervised", "--model", c.model, "--data", "sft", "--lake", lake, "--max-steps",
          size.sft_steps, "--learning-rate", size.sft_lr, "--batch-size", size.sft_batch, "--seed", 0, "--output", run,
          "--no-plot", "--quiet", log="sft")
    return run


def arm_run(c: Commands, size: Size, lake: Path, init: Path, arm: str, seed: int, families: bool,
            env: str) -> list[dict]:
    own = c.work / "lakes" / f"{arm}-seed{seed}"
    if own.exists():
        shutil.rmtree(own)
    shutil.copytree(lake, own)
    cfg = c.project_file(f"{arm}-seed{seed}", eval_episodes=size.eval_limit, **ARMS[arm][1])
    run = c.work / "arms" / f"{arm}-seed{seed}"
    recs = online_curve(c, own, seed, init, strategy="online", arm=arm, run=run, cfg=cfg, steps=size.steps,
                        eval_every=size.eval_every, micro_batch=size.micro_batch, curriculum=True, env=env)
    if families:  # the end model on the task families no training row shows
        recs[-1].update(c.evaluate(env, size.eval_limit, run, log=f"fam-{arm}-seed{seed}", split="test_families"))
    return recs


def table(records: list[dict], arms: list[str], size: Size, init_families: float | None) -> list[str]:
    steps = steps_of(size)
    fam = init_families is not None
    head = ["arm", "seeds", "success at step 0", *(f"step {k}" for k in steps[1:]), "end - start (same seeds)",
            "first-turn calls valid at the end",
            *([f"held-out families at the end (SFT model: {init_families:.2f})"] if fam else [])]
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for arm in arms:
        mine = sorted((r for r in records if r["arm"] == arm), key=lambda r: r["seed"])
        at = {k: [r["success"] for r in mine if r["step"] == k] for k in steps}
        diff = [b - a for a, b in zip(at[0], at[size.steps])]
        valid = [r["first_valid"] for r in mine if r["step"] == size.steps]
        cells = [ARMS[arm][0], str(len({r['seed'] for r in mine})), *(fmt_ci(at[k]) for k in steps), fmt_ci(diff),
                 fmt_ci(valid)]
        if fam:
            cells.append(fmt_ci([r["fam_success"] for r in mine if r["step"] == size.steps]))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def signal_table(records: list[dict], arms: list[str]) -> list[str]:
    """Each run's fraction of groups with a reward difference at every step (GRPO learns from those groups only;
    a step with none makes no update), from the runs' step logs; runs recorded without it are left out."""
    runs = [r for arm in arms for r in sorted((r for r in records if r["arm"] == arm and "signal" in r),
                                             key=lambda r: r["seed"])]
    if not runs:
        return []
    rows = ["Groups with a reward difference, per training step (the fraction of the step's groups; none: no update):",
            "", "| arm | seed | per step | mean | steps with none |", "|---|---|---|---|---|"]
    for r in runs:
        sig = r["signal"]
        rows.append(f"| {ARMS[r['arm']][0]} | {r['seed']} | {' '.join(f'{x:.2f}' for x in sig)} | "
                    f"{sum(sig) / max(len(sig), 1):.2f} | {sum(x == 0 for x in sig)} of {len(sig)} |")
    return [*rows, ""]


def seeds_before(path: Path, args: argparse.Namespace, size: Size) -> dict:
    """The records of seeds below --seed-from in an earlier arms.json, checked to be of the same experiment."""
    was, recs = earlier_records(
        path, f"--seed-from {args.seed_from}", lambda was: {
            "model": (was["model"], args.model), "env": (was["env"], args.env),
            "init": (was["init"], str(args.init.resolve()) if args.init else None),
            "arms": (sorted(was["arms"]), sorted(args.arms)),
            **{k: (was["size"][k], v) for k, v in asdict(size).items() if k not in ("seeds", "jobs")}},
        lambda r: r["seed"] < args.seed_from, args.seed_from)
    return {"init_families": was["init_families"], "records": recs}


def steps_of(size: Size) -> list[int]:
    return sorted({0, *range(size.eval_every, size.steps + 1, size.eval_every), size.steps})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a model folder")
    ap.add_argument("--init", type=Path, help="the SFT run folder every arm starts from (default: train one)")
    ap.add_argument("--lake", type=Path, help="with --init: the lake of its expert rollouts (the curriculum's prior)")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 steps, 4 tasks: checks that everything runs")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                    help="the arms to run: " + "; ".join(f"{k} = {v[0]}" for k, v in ARMS.items()))
    ap.add_argument("--env", default=BASH, help=f"the environment the arms train and are scored on (default {BASH})")
    ap.add_argument("--eval-limit", type=int, help="test tasks per evaluation (default 100)")
    ap.add_argument("--seeds", type=int, help="seeds per arm (default 2)")
    ap.add_argument("--steps", type=int, help="online steps per run (default 16)")
    ap.add_argument("--eval-every", type=int, help="steps between held-out evaluations (default 8)")
    ap.add_argument("--families", action="store_true",
                    help="also score the SFT model and each run's end model on the test_families split "
                         "(task families no training row shows)")
    ap.add_argument("--jobs", type=int, help="commands side by side (default 2)")
    ap.add_argument("--out", type=Path, help="where the table and records go (default bench/online_arms/<model>)")
    work_options(ap)
    ap.add_argument("--seed-from", type=int, default=0,
                    help="run seeds from this one on and take the lower seeds' records from --out's arms.json "
                         "(the same model, environment, --init, arms and size): a second seed added to a first")
    args = ap.parse_args()
    if args.lake and not args.init:
        ap.error("--lake goes with --init (without --init the SFT model's lake is built here)")
    size = SIZES["quick" if args.quick else "cpu"]
    size = Size(**{**asdict(size), **{k: v for k, v in (("seeds", args.seeds), ("jobs", args.jobs),
                                                         ("steps", args.steps), ("eval_every", args.eval_every),
                                                         ("eval_limit", args.eval_limit))
                                      if v}})
    out = args.out or ROOT / "bench" / "online_arms" / ("quick" if args.quick else args.model)
    out.mkdir(parents=True, exist_ok=True)
    work = work_folder(args, ap, "lachesis-arms-")
    c = Commands(work, args.model, resume=args.resume)
    earlier = seeds_before(out / "arms.json", args, size) if args.seed_from else None
    load0, t0 = os.getloadavg()[0], time.time()
    print(f"online arms: model {args.model}, {size.seeds} seeds x {len(args.arms)} arms, work {work}, "
          f"load {load0:.2f}", flush=True)

    def run_arms() -> dict:
        lake = args.lake or work / "lake"
        if not args.lake:
            c.run("lake", "init", "--lake", lake, log="init")
        init = args.init.resolve() if args.init else sft_model(c, size, lake, args.env)
        jobs = [lambda a=a, sd=sd: arm_run(c, size, lake, init, a, sd, args.families, args.env)
                for sd in range(args.seed_from, size.seeds) for a in args.arms]
        if args.families and earlier is None:
            jobs.append(lambda: c.evaluate(args.env, size.eval_limit, init, log="fam-init", split="test_families"))
        recs = pool(size.jobs, jobs)
        if earlier is not None:
            init_families, recs = earlier["init_families"], [earlier["records"], *recs]
        else:
            init_families = recs.pop()["fam_success"] if args.families else None
        return {"init": init, "init_families": init_families, "records": [r for rs in recs for r in rs],
                **time_spent(t0, c.logs)}

    spent = run_in_work(args, work, run_arms)
    init, init_families, records = spent.pop("init"), spent.pop("init_families"), spent.pop("records")
    load1 = os.getloadavg()[0]
    (out / "arms.json").write_text(json.dumps({"size": asdict(size), "model": args.model, "env": args.env, "init": str(init),
                                               "arms": {a: {"about": ARMS[a][0], "keys": ARMS[a][1]} for a in args.arms}, "machine": machine(),
                                               "load": [load0, load1], "init_families": init_families, "records": records, **spent}, indent=1))
    lines = [f"# Online RL arms from one SFT model ({args.model})", "",
             f"Generated by `python bench/online_arms.py --model {args.model}{' --quick' if args.quick else ''}"
             f"{f' --env {args.env}' if args.env != BASH else ''}{' --init RUN' if args.init else ''}{' --lake LAKE' if args.lake else ''}"
             f"{f' --steps {args.steps}' if args.steps else ''}{f' --eval-every {args.eval_every}' if args.eval_every else ''}"
             f"{f' --seeds {args.seeds}' if args.seeds else ''}{f' --eval-limit {args.eval_limit}' if args.eval_limit else ''}{' --families' if args.families else ''}"
             f"{f' --seed-from {args.seed_from}' if args.seed_from else ''}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute load {load0:.2f} at the start, "
             f"{load1:.2f} at the end; "
             + (f"resumed: the commands' own times sum to {spent['commands_s'] / 60:.0f} min" if args.resume else
                f"{spent['total_s'] / 60:.0f} min, {spent['cpu_s'] / 60:.0f} CPU-min")
             + f"{f' (seeds {args.seed_from} on; the lower ones from the earlier arms.json)' if args.seed_from else ''}.", "",
             f"Held-out success (greedy, {args.env} test split, first {size.eval_limit} tasks) of rl_train_online "
             f"--curriculum from the same SFT model ({'--init: ' + init.name if args.init else f'{size.sft_steps} steps on {size.expert} expert rollouts'}), {size.steps} steps of `batch_size` tasks x `group_size` rollouts (4 unless an arm's keys say); means with "
             "a 95% t-interval over seeds. Each arm's lachesis.toml keys (the rest are the defaults): "
             + "; ".join(f"{ARMS[a][0]}: `{ARMS[a][1]}`" for a in args.arms) + ".", "",
             *table(records, args.arms, size, init_families), "", *signal_table(records, args.arms),
             "Raw records: arms.json."]
    (out / "ARMS.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
