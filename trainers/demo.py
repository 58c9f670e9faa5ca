"""The end-to-end demo (`python -m trainers.demo`, `just demo`): lake -> views -> fine-tune -> evaluate.

1. a fresh lake, filled with expert and noisy rollouts of bash_exec_env's train split (and the sample skills
   when the ingest wing can read them);
2. the `sft` view exported to a pinned dataset folder (parquet + manifest.json);
3. the tiny model (2 layers, hidden 128, BPE on train-split text) evaluated greedily on the test split;
4. full fine-tuning for a fixed time budget (assistant-only loss);
5. the same evaluation with the fine-tuned model, same seeds; a table, plots, and every episode in the lake.

Budget: under 5 minutes on 2 cores (imports and the first tiny-model build included).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .config import setup_env

ENV = "bash_exec_env"


def _skills_into_lake(lake, work: Path, console) -> int:
    """The sample skills (the vendored Hermes skill corpus, in the Hermes folder layout) through the ingest
    wing's folder watcher; 0 if the corpus is absent."""
    try:
        from ingest.testing import hermes_skills_tree
        from ingest.watch import Watcher

        dest = hermes_skills_tree(work / "skills")
        w = Watcher(lake, skills_dir=dest, settle=0.0)
        w.scan()
        return int(w.stats.get("skill_upserts", 0))
    except FileNotFoundError:
        return 0
    except Exception as exc:  # optional step: say why, never fail the demo on it
        console.print(f"[yellow]    sample skills not loaded: {type(exc).__name__}: {exc}")
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainers.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None, help="where the lake, dataset, run and plots go (default runs/demo-<time>)")
    ap.add_argument("--from-lake", default=None, metavar="LAKE",
                    help="skip the rollouts: train on this existing lake's sft view (just train-sft)")
    ap.add_argument("--expert", type=int, default=2200, help="expert rollouts (train split)")
    ap.add_argument("--noisy", type=int, default=100, help="noisy rollouts (other train tasks)")
    ap.add_argument("--steps", type=int, default=1800, help="optimizer steps of the fine-tuning")
    ap.add_argument("--train-seconds", type=float, default=200.0, help="training time budget (at most)")
    ap.add_argument("--deadline", type=float, default=290.0,
                    help="whole-demo wall-clock target in seconds: the training budget shrinks to keep it (0 = off)")
    ap.add_argument("--eval-limit", type=int, default=100, help="test tasks evaluated (all 100 by default)")
    ap.add_argument("--eval-split", default="test", help="test (default); train with --eval-offset for tuning")
    ap.add_argument("--eval-offset", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lora", action="store_true", help="LoRA instead of full fine-tuning (worse from scratch)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the rollouts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    # The demo is the machine's main job: 2 torch threads gave 2094 steps in 200 s against ~1200 with one.
    # Tests and shared runs keep 1 (training-notes pitfall 3); LACHESIS_THREADS=1 restores it here.
    os.environ.setdefault("LACHESIS_THREADS", "2")
    setup_env()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rich.console import Console
    from rich.table import Table

    console = Console()
    work = Path(a.workdir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime())).resolve()
    lake_root = Path(a.from_lake).resolve() if a.from_lake else work / "lake"
    if a.from_lake and not (lake_root / "trajectories").exists():
        console.print(f"[red]error: {lake_root} is not a lake (no trajectories table): fill one with `lake rollout` first")
        return 2
    if not a.from_lake and lake_root.exists() and any(lake_root.iterdir()):
        console.print(f"[red]error: {lake_root} exists: the demo starts from a fresh lake; pass a new --workdir")
        return 2
    work.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}

    def lap(name, t0):
        times[name] = round(time.perf_counter() - t0, 2)

    # 1. fresh lake + rollouts
    t0 = time.perf_counter()
    from lake import Lake

    from .rollouts import policy_rows

    if a.from_lake:
        lake = Lake(str(lake_root))
        roll = {"from_lake": str(lake_root)}
        console.print(f"[bold]1/5[/] using the lake at {lake_root} (no new rollouts)")
    else:
        lake = Lake.init(str(lake_root))
        console.print(f"[bold]1/5[/] fresh lake at {lake_root}; rolling out {a.expert} expert + {a.noisy} noisy "
                      f"episodes of {ENV} (train split)")
        expert = policy_rows(ENV, "train", a.expert, "expert", seed=a.seed, workers=a.workers)
        noisy = policy_rows(ENV, "train", a.noisy, "noisy", seed=a.seed + 100_000, offset=a.expert, workers=a.workers)
        lake.append("trajectories", expert + noisy)
        n_skills = _skills_into_lake(lake, work, console)
        roll = {"expert": len(expert), "expert_success": sum(r["success"] for r in expert) / max(1, len(expert)),
                "noisy": len(noisy), "noisy_success": sum(r["success"] for r in noisy) / max(1, len(noisy)),
                "skills": n_skills}
        console.print(f"    expert success {roll['expert_success']:.2f}, noisy success {roll['noisy_success']:.2f}, "
                      f"{n_skills} sample skills")
    lap("rollouts", t0)

    # 2. the sft view -> pinned dataset
    t0 = time.perf_counter()
    from views.export import export_view

    ds_dir = work / "dataset_sft"
    manifest = export_view(lake, "sft", ds_dir, format="parquet")
    lap("export", t0)
    console.print(f"[bold]2/5[/] exported the sft view: {manifest.get('row_count', manifest.get('rows'))} rows -> {ds_dir} ({times['export']} s)")

    # 3. before
    from .evaluate import EvalSettings, run_eval
    from .models import tiny_model_path
    from .config import SFTConfig
    from .sft import run_sft

    t0 = time.perf_counter()
    tiny = tiny_model_path()
    lap("tiny_model", t0)
    ev = dict(model="tiny", task=ENV, split=a.eval_split, offset=a.eval_offset, limit=a.eval_limit, seed=a.seed,
              lake_root=str(lake_root), progress=False)
    t0 = time.perf_counter()
    before = run_eval(EvalSettings(**ev))
    lap("eval_before", t0)
    console.print(f"[bold]3/5[/] before: success {before['success_rate']:.3f}, mean reward {before['mean_reward']:.3f}, "
                  f"valid tool calls {before['valid_tool_call_rate']:.3f} ({times['eval_before']} s)")

    # 4. fine-tune
    t0 = time.perf_counter()
    budget = a.train_seconds
    if a.deadline:  # leave time for loading the data (~5 s) and the second evaluation (~1.5x the first: 2 turns)
        left = a.deadline - (time.perf_counter() - t_start) - 1.5 * times["eval_before"] - 8
        budget = max(20.0, min(budget, left))
    times["train_budget"] = round(budget, 1)
    console.print(f"[bold]4/5[/] fine-tuning the tiny model ({'LoRA' if a.lora else 'full'}, {budget:.0f} s budget)")
    run = run_sft(SFTConfig(model="tiny", data=str(ds_dir), output=str(work / "run"), full=not a.lora,
                            max_steps=a.steps, lr=a.lr if not a.lora else max(a.lr, 2e-3),
                              batch_size=a.batch_size, seed=a.seed, lake_root=str(lake_root), progress=True), console)
    lap("train", t0)

    # 5. after
    t0 = time.perf_counter()
    after = run_eval(EvalSettings(**ev, adapter=run["adapter_path"]))
    lap("eval_after", t0)
    console.print(f"[bold]5/5[/] after: success {after['success_rate']:.3f}, mean reward {after['mean_reward']:.3f} ({times['eval_after']} s)")

    times["total"] = round(time.perf_counter() - t_start, 2)
    table = Table(title=f"{ENV} {a.eval_split} split ({before['episodes']} tasks, greedy, seed {a.seed})")
    for c in ("model", "success rate", "mean reward", "valid tool calls", "mean turns"):
        table.add_column(c, justify="right" if c != "model" else "left")
    for name, r in (("tiny, before", before), (f"tiny + SFT ({run['steps']} steps)", after)):
        table.add_row(name, f"{r['success_rate']:.3f}", f"{r['mean_reward']:.3f}", f"{r['valid_tool_call_rate']:.3f}",
                      f"{r['mean_turns']:.2f}")
    console.print(table)
    per_tmpl = _per_template(after)
    if per_tmpl:
        t2 = Table(title="after, success by task template")
        t2.add_column("template")
        t2.add_column("success", justify="right")
        for k, v in sorted(per_tmpl.items()):
            t2.add_row(k, f"{v:.2f}")
        console.print(t2)
    plot = _plot(before, after, run, work / "demo_eval.png")
    console.print(f"train {run['train_s']:.0f} s, {run['steps']} steps, {run['tokens_per_s']:.0f} tok/s, loss "
                  f"{run['first_loss']:.2f} -> {run['final_loss']:.3f}; plots: {run['loss_plot']}, {plot}")
    console.print("times (s): " + ", ".join(f"{k} {v}" for k, v in times.items()))
    result = {"workdir": str(work), "rollouts": roll, "before": _strip(before), "after": _strip(after),
              "train": {k: run[k] for k in ("run_id", "steps", "train_s", "tokens_per_s", "first_loss", "final_loss",
                                            "conversations", "adapter_path")},
              "per_template_after": per_tmpl, "times": times, "plots": [run["loss_plot"], str(plot)]}
    (work / "demo_result.json").write_text(json.dumps(result, indent=2, default=str))
    if a.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def _strip(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "per_task"}


def _per_template(summary: dict) -> dict:
    try:
        import envs

        tmpl = {t.task_id: t.template for t in envs.load_tasks(summary["env"], summary["split"])}
    except Exception:
        return {}
    agg: dict[str, list[int]] = {}
    for r in summary["per_task"]:
        agg.setdefault(tmpl.get(r["task_id"], "?"), []).append(int(r["success"]))
    return {k: sum(v) / len(v) for k, v in agg.items()}


def _plot(before: dict, after: dict, run: dict, png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    keys = ["success_rate", "mean_reward", "valid_tool_call_rate"]
    xs = range(len(keys))
    ax.bar([x - 0.2 for x in xs], [before[k] for k in keys], 0.4, label="before")
    ax.bar([x + 0.2 for x in xs], [after[k] for k in keys], 0.4, label=f"after SFT ({run['steps']} steps)")
    ax.set_xticks(list(xs), ["success", "mean reward", "valid tool call"])
    ax.set_ylim(0, 1)
    ax.set_title(f"{before['env']} {before['split']} split, {before['episodes']} tasks", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return png


if __name__ == "__main__":
    sys.exit(main())
