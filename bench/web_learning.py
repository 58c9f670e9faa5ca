"""Strategy 1 on web_form_env: does SFT from expert web trajectories make the model fill forms it never saw?

The same runs as learning.py's strategy 1 (strategies.strategy_sft through harness.Commands: the real console
commands, each stopping on a fixed, seeded step count), on the web environment: expert rollouts of the train split
into a lake (`lake rollout --env web_form_env --policy expert`), `rl_finetune_supervised --data sft` (LoRA for a
pretrained model), and `hermes_eval` before (the base model) and after on

- the test split's first `--test-limit` tasks: test task i is template i % 25, so 25 is one unseen seed per
  training task, and
- the test_families split's first `--families-limit` tasks: the 6 MiniWoB tasks never trained on (other
  layouts, orderings, a popup, a case rule), i % 6 as well;

with the first-turn valid tool call rate beside success. The base evaluations run beside the training (they need
only the base model), the jobs side by side one torch thread each. Table and raw records go to --out
(bench/web_learning/<model>/ by default).

    python bench/web_learning.py --model smollm2 --work /tmp/weblearn            # 1 seed, 24 steps, batch 8
    python bench/web_learning.py --model smollm2 --first-seed 1 --work /tmp/weblearn --resume  # add seed 1

An invocation adds its seeds to the records already in --out from a run of the same model and sizes (another
seed's, run before or beside it), so seeds can run in separate invocations, side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench_json import machine
from harness import ROOT, Commands, by, fmt_ci, pool, time_spent, run_in_work, work_folder, work_options
from strategies import SIZES, Size, strategy_sft

WEB = "web_form_env"
# the pretrained model on 2 shared CPU cores: the bash "cpu" size's lr and batch, fewer steps and tasks
WEB_SIZE = replace(SIZES["cpu"], seeds=1, eval_limit=25, families_limit=12, sft_steps=(24,), jobs=3, families=True)


GENERATED = "web_gen_env"  # generated form tasks (envs/web/generated): --generated mixes their expert episodes in


def run_all(size: Size, model: str, work: Path, expert: int, resume: bool, first_seed: int = 0,
            accum: int = 1, generated: int = 0, base: dict | None = None, threads: int = 1) -> dict:
    """`accum`: micro-batches of size.sft_batch per optimizer step (the memory lever); `generated`: expert episodes
    of generated form tasks in the same lake (the sft view mixes them in); `base`: the base model's figures from an
    earlier run of the same limits (its evaluations are skipped); `threads`: torch threads per command."""
    c = Commands(work, model, resume, threads)
    t0 = time.time()
    lake = work / "lake_web"
    c.run("lake", "init", "--lake", lake, log="init-web")
    c.run("lake", "rollout", "--env", WEB, "--policy", "expert", "--episodes", expert, "--workers", 2, "--lake", lake,
          log="rollout-web")
    if generated:
        c.run("lake", "rollout", "--env", GENERATED, "--policy", "expert", "--episodes", generated, "--workers", 2,
              "--lake", lake, log="rollout-generated")
    evals = [] if base else [
        lambda: c.evaluate(WEB, size.eval_limit, None, log="base-eval-web"),
        lambda: c.evaluate(WEB, size.families_limit, None, log="base-fam-web", split="test_families")]
    out = pool(size.jobs, [
        *evals,
        *(lambda sd=sd: strategy_sft(c, size, lake, sd, env=WEB, extra=("--grad-accum", accum) if accum > 1 else ())
          for sd in range(first_seed, first_seed + size.seeds))])
    records = [{**r, "micro_batch": size.sft_batch} for rs in out[len(evals):] for r in rs]
    return {"base": base or {**out[0], **out[1]}, "records": records, **time_spent(t0, c.logs)}


# The published MiniWoB++ figures issue 39 cites, and what differs from this bench's setting.
ANCHORS = [
    "Published MiniWoB++ figures beside it (means over each paper's own MiniWoB++ task set, not these 31 tasks):",
    "",
    "| who | model | demonstrations | observation | mean success |",
    "|---|---|---|---|---|",
    "| humans | - | - | the screen | 93.5% |",
    "| WebGUM | fine-tuned 3B | 401K | HTML and a screenshot | 94% |",
    "| Gur et al. 2022 | fine-tuned T5-3B | 12K | HTML | 50% |",
    "| this bench | SmolLM2-135M-Instruct, LoRA | the expert episodes above (one per task seed) | "
    "MiniWoB's instruction and an element list as text (envs/web/observe.py) | the table above |",
    "",
    "What differs: the tasks (25 form and widget tasks of MiniWoB's ~125 trained, 6 whole tasks held out, greedy, "
    "one try per seed, success = MiniWoB's raw reward > 0), the observation (text, no pixels), the model (22x "
    "smaller than 3B) and the demonstrations (hundreds, not 12K-401K; tens of LoRA steps on 2 CPU cores).",
]


def table(result: dict, size: Size) -> list[str]:
    recs = sorted(by(result["records"], step=size.sft_steps[-1]), key=lambda r: r["seed"])
    size = replace(size, seeds=len(recs))
    base, n = result["base"], len(recs)
    rows = ["| measure | before (base model) | after SFT (per seed) | after - before |", "|---|---|---|---|"]
    for key, label in (("success", f"test success (first {size.eval_limit} test tasks: unseen seeds of the 25 "
                                   "training tasks)"),
                       ("first_valid", "test valid first-turn tool calls"),
                       ("valid", "test valid tool calls (all turns)"),
                       ("fam_success", f"held-out tasks success (test_families, first {size.families_limit}: "
                                       "6 tasks never trained)"),
                       ("fam_first_valid", "held-out tasks valid first-turn tool calls"),
                       ("fam_valid", "held-out tasks valid tool calls (all turns)")):
        after = [r[key] for r in recs]
        each = f" ({', '.join(f'{a:.2f}' for a in after)})" if n > 1 else ""
        rows.append(f"| {label} | {base[key]:.3f} | {fmt_ci(after)}{each} | {fmt_ci([a - base[key] for a in after])} |")
    return rows


# named in the report when set
FLAGS = ("steps", "batch", "micro_batch", "expert", "generated", "test_limit", "families_limit", "threads")


def write_report(result: dict, size: Size, args, out: Path, loads: tuple, flags: str) -> Path:
    """`flags`: the options of FLAGS that the run set to other than their defaults, as typed."""
    took = (f"resumed: the commands' own times sum to {result['commands_s'] / 60:.0f} min" if args.resume else
            f"{result['total_s'] / 60:.0f} min in all, {result['cpu_s'] / 60:.0f} CPU-min")
    lines = [f"# Learning on web_form_env: SFT from expert web trajectories (model {args.model})", "",
             f"Generated by `python bench/web_learning.py --model {args.model}{flags}` (seeds "
             f"{sorted(r['seed'] for r in result['records'])}, one invocation each or together) on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; 1-minute load average "
             f"{loads[0]:.2f} at the start, {loads[1]:.2f} at the end; {took} ({size.jobs} commands side by side, "
             f"{args.threads} torch thread{'s' if args.threads > 1 else ''} each).", "",
             f"{args.expert} expert episodes of the train split (train task i is training task i % 25)"
             + (f" and {args.generated} of generated form tasks ({GENERATED})" if args.generated else "")
             + " in the lake; "
             f"`rl_finetune_supervised --model {args.model} --data sft --max-steps {size.sft_steps[-1]}` at lr "
             f"{size.sft_lr}, {args.batch} conversations a step (LoRA for a pretrained model; micro-batches per seed "
             f"{ {r['seed']: r.get('micro_batch') for r in result['records']} }, the same step in less memory); "
             f"`hermes_eval` greedy with "
             f"its default turns and tokens. "
             f"Figures after SFT are means over seeds (± the 95% t-interval's half-width with 2+ seeds); the base "
             f"model is greedy, so one evaluation serves every seed"
             + (f" (its figures reused from {args.base_from.name}, an earlier run of the same limits)."
                if args.base_from else "."), ""]
    lines += table(result, size)
    lines += ["", *ANCHORS, "", "Raw records: web_learning.json."]
    path = out / "LEARNING.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="tiny | smollm2 | a model folder (LoRA for a pretrained one)")
    ap.add_argument("--seeds", type=int, default=WEB_SIZE.seeds, help="SFT seeds (default 1)")
    ap.add_argument("--first-seed", type=int, default=0, help="the first of them (default 0)")
    ap.add_argument("--steps", type=int, default=WEB_SIZE.sft_steps[-1], help="SFT steps per run (default 24)")
    ap.add_argument("--batch", type=int, default=WEB_SIZE.sft_batch, help="conversations per SFT step (default 8)")
    ap.add_argument("--micro-batch", type=int, default=2,
                    help="conversations per forward pass (default 2: 8 at once took 14-17 GB with SmolLM2)")
    ap.add_argument("--expert", type=int, default=200, help="expert train-split episodes in the lake (default 200)")
    ap.add_argument("--generated", type=int, default=0,
                    help=f"expert episodes of generated form tasks ({GENERATED}) mixed into the lake (default 0)")
    ap.add_argument("--base-from", type=Path,
                    help="a web_learning.json of the same --test-limit and --families-limit: its base-model figures "
                         "are reused and the base evaluations skipped (greedy: the same model gives the same figures)")
    ap.add_argument("--test-limit", type=int, default=WEB_SIZE.eval_limit, help="test tasks evaluated (default 25)")
    ap.add_argument("--families-limit", type=int, default=WEB_SIZE.families_limit,
                    help="test_families tasks evaluated (default 12)")
    ap.add_argument("--out", type=Path, help="table and records (default bench/web_learning/<model>)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per command (default 1; one seed alone with --base-from may take 2 cores)")
    work_options(ap)
    args = ap.parse_args()
    for name in ("seeds", "steps", "expert", "test_limit", "families_limit", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.first_seed < 0 or args.generated < 0:
        ap.error("--first-seed and --generated must be at least 0")
    if args.micro_batch < 1 or args.batch % args.micro_batch:
        ap.error(f"--micro-batch must divide --batch ({args.batch}), got {args.micro_batch}")
    size = replace(WEB_SIZE, seeds=args.seeds, sft_steps=(args.steps,), eval_limit=args.test_limit,
                   families_limit=args.families_limit, sft_batch=args.micro_batch)
    out = args.out or ROOT / "bench" / "web_learning" / Path(args.model).name
    out.mkdir(parents=True, exist_ok=True)
    work = work_folder(args, ap, "lachesis-web-learning-")
    load0 = os.getloadavg()[0]
    print(f"web learning: model {args.model}, {size.seeds} seeds, {args.steps} steps, work {work}", flush=True)
    base = None
    if args.base_from:
        earlier = json.loads(args.base_from.read_text())
        if (earlier["size"]["eval_limit"], earlier["size"]["families_limit"]) != (size.eval_limit, size.families_limit):
            ap.error(f"--base-from {args.base_from}: evaluated other limits than --test-limit/--families-limit")
        base = earlier["base"]
    result = run_in_work(args, work, lambda: run_all(size, args.model, work, args.expert, args.resume,
                                                     args.first_seed, args.batch // args.micro_batch,
                                                     args.generated, base, args.threads))
    load1 = os.getloadavg()[0]
    # what trains the same model: the micro-batch only trades memory for time
    setting = {"size": asdict(replace(size, seeds=1, sft_batch=None)), "model": args.model, "expert": args.expert,
               "generated": args.generated, "batch": args.batch}
    saved = out / "web_learning.json"
    earlier = json.loads(saved.read_text()) if saved.exists() else {}
    if {k: earlier.get(k) for k in setting} == json.loads(json.dumps(setting)):  # the same run, other seeds
        mine = {r["seed"] for r in result["records"]}
        result["records"] = sorted([r for r in earlier["records"] if r["seed"] not in mine] + result["records"],
                                   key=lambda r: r["seed"])
    saved.write_text(json.dumps({**setting, "machine": machine(), "load": [load0, load1], **result}, indent=1))
    flags = "".join(f" --{name.replace('_', '-')} {getattr(args, name)}" for name in FLAGS
                    if getattr(args, name) != ap.get_default(name))
    print(write_report(result, size, args, out, (load0, load1), flags).read_text())


if __name__ == "__main__":
    main()
