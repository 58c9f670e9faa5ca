"""The end-to-end demo (`python -m lachesis.demo`, `just demo`): lake -> views -> fine-tune -> evaluate.

1. a fresh lake, filled with expert and noisy rollouts of bash_exec_env's train split and the sample skills
   (with --from-lake: an existing lake instead, as `just train-sft` does);
2. the `sft` view exported to a pinned dataset folder (parquet + manifest.json);
3. the model evaluated greedily on the test split of every environment the dataset holds: the pretrained
   SmolLM2-135M-Instruct by default (`--model smollm2`), or the from-scratch tiny model (`--model tiny`: 2 layers,
   hidden 128, BPE on train-split text) or any model folder;
4. fine-tuning for a fixed, seeded number of optimizer steps (assistant-only loss): LoRA for a pretrained model,
   full fine-tuning for the tiny one; the same run on every machine, only its duration differs;
5. the same evaluation with the fine-tuned model, same seeds; a table, plots, and every episode in the lake.

It lives in the CLI face because it composes every wing: ingest (the skills watcher and the sample skills),
views, envs and trainers. SmolLM2 is the default because it is what a newcomer should see: a real model going from
no valid tool call to solving held-out tasks, in about 5 minutes on 2 idle cores (SIZES; README quick start). The
tiny model learns only the format in that time (0.00 -> 0.03-0.11 after 1,800 steps) and stays for the tests.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lachesis.console import config_app, literal, new_console, print_json, run, table
from lachesis.errors import CommandError
from trainers.runtime.options import at_least, helped
from trainers.runtime.device import check_device, setup_env
from trainers.modeling.tiny import TINY_NAMES

ENV = "bash_exec_env"
# The defaults per kind of model. The tiny model trains from scratch: many cheap full fine-tuning steps on many
# distinct chats. A pretrained one already writes text and its steps and episodes cost far more, so fewer rollouts,
# steps and evaluated tasks; its lr and step count are the best of a small sweep that fits about 5 minutes
# (docs/training-notes.md, "Figures behind the code").
SIZES = {
    "tiny": dict(expert=2200, noisy=100, steps=1800, eval_limit=100, lr=1e-3, batch_size=16),
    "pretrained": dict(expert=300, noisy=0, steps=24, eval_limit=20, lr=2e-3, batch_size=8),
}


def _sized(what: str) -> str:
    return f"(default {SIZES['tiny'][what]:g} for tiny, {SIZES['pretrained'][what]:g} for a pretrained model)"


@dataclass(kw_only=True)
class DemoConfig:
    model: str = field(default="smollm2", **helped(
        "smollm2 (SmolLM2-135M-Instruct, LoRA) | tiny (trained from scratch, full fine-tuning; fast, learns little) | "
        "a pretrained model folder or hub id (LoRA)"))
    workdir: str | None = field(default=None, **helped("where the lake, dataset, run and plots go (default runs/demo-<time>)"))
    from_lake: bool = field(default=False, **helped(
        "train on the existing lake at --lake instead of a fresh one filled with rollouts (just train-sft)"))
    lake_root: str | None = field(default=None, **helped("the lake of --from-lake (default $LAKE_ROOT or ./data/lake)"))
    expert: int | None = field(default=None, **helped(f"expert rollouts of {ENV}'s train split in the fresh lake "
                                                      + _sized("expert")))
    noisy: int | None = field(default=None, **helped("noisy rollouts (realistic mistakes, other train tasks) "
                                                     + _sized("noisy")))
    steps: int | None = field(default=None, **helped("optimizer steps of the fine-tuning " + _sized("steps")))
    eval_limit: int | None = field(default=None, **helped("tasks evaluated per environment (the whole test split: "
                                                          "100) " + _sized("eval_limit")))
    eval_split: str = field(default="test", **helped("test; train with --eval-offset to tune without the test split"))
    eval_offset: int = field(default=0, **helped("skip this many tasks of the evaluation split"))
    lr: float | None = field(default=None, **helped("peak learning rate " + _sized("lr")))
    batch_size: int | None = field(default=None, **helped("conversations per optimizer step " + _sized("batch_size")))
    lora: bool | None = field(default=None, **helped(
        "LoRA (--lora) or full fine-tuning (--full); default full for tiny (LoRA on a random base cannot learn), "
        "LoRA for a pretrained model"))
    workers: int = field(default=2, **helped("processes for the rollouts"))
    seed: int = field(default=0, **helped("seed of the rollouts, the training and the evaluation"))
    # the demo is the machine's main job, and 2 threads train it much faster than one (tests and shared runs keep
    # 1: docs/training-notes.md pitfall 3 and section 10)
    threads: int = field(default=2, **helped("torch threads"))
    device: str = field(default="auto", **helped("auto (cuda when available) | cpu | cuda | cuda:N"))
    progress: bool = field(default=True, **helped("show the training progress bar"))

    def __post_init__(self):
        if not str(self.model or "").strip():
            raise CommandError("no model given: pass --model tiny, --model smollm2 or a model folder")
        for name, default in SIZES[self.size].items():  # unset sizes from the model's kind
            if getattr(self, name) is None:
                setattr(self, name, default)
        at_least(self, 1, "steps", "eval_limit", "batch_size", "workers", "threads")
        at_least(self, 0, "expert", "noisy", "eval_offset")
        if not self.from_lake and self.expert < 1:
            raise CommandError("--expert must be at least 1 for a fresh lake: the sft view needs good trajectories")
        if self.lr <= 0:
            raise CommandError(f"--lr must be positive, got {self.lr}")
        self.device = check_device(self.device)

    @property
    def size(self) -> str:
        """The SIZES row of this model: tiny, or pretrained for every other model."""
        return "tiny" if self.model.strip().lower() in TINY_NAMES else "pretrained"


def _skills_into_lake(lake, work: Path) -> int:
    """The sample skills (the packaged Hermes skill corpus, in the Hermes folder layout) through the ingest
    wing's folder watcher, as a user's ~/.hermes/skills would arrive."""
    from ingest.samples import sample_skills_tree
    from ingest.watch import Watcher

    w = Watcher(lake, skills_dir=sample_skills_tree(work / "skills"), settle=0.0)
    w.scan()
    return int(w.stats["skill_upserts"])


def _dataset_envs(ds_dir: Path, console) -> list[str]:
    """The registered environments the exported dataset holds trajectories of: what the demo evaluates."""
    import envs
    from trainers.sft.data import load_rows

    rows, _, _ = load_rows(str(ds_dir))
    found = sorted({r["env"] for r in rows if r.get("env")})
    names = []
    for e in found:
        try:
            names.append(envs.resolve_name(e))
        except envs.UnknownEnvironmentError:
            console.print(f"[yellow]    not evaluated: {literal(e)} is not a registered environment")
    return names


def run_demo(cfg: DemoConfig, console) -> dict:
    """The five steps; writes demo_result.json and the plots into the work folder and returns the result."""
    from lake import Lake, resolve_root
    from trainers.runtime.runfolder import trainer_lake
    from trainers.sft.config import SFTConfig
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import run_eval
    from trainers.modeling.models import model_label, resolve_model
    from trainers.runtime.plots import write_eval_plot
    from trainers.generation.rollouts import policy_rows
    from trainers.sft.sft import run_sft
    from views.export import export_view

    t_start = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(cfg.workdir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime())).resolve()
    times: dict[str, float] = {}

    def lap(name, t0):
        times[name] = round(time.perf_counter() - t0, 2)

    # 1. the lake
    t0 = time.perf_counter()
    if cfg.from_lake:
        lake_root = resolve_root(cfg.lake_root).resolve()
        lake = trainer_lake(str(lake_root), "drop --from-lake (the demo then fills a fresh lake of its own)")
        work.mkdir(parents=True, exist_ok=True)
        roll: dict = {"from_lake": str(lake_root)}
        console.print(f"[bold]1/5[/] using the lake at {literal(lake_root)} (no new rollouts)")
    else:
        lake_root = work / "lake"
        if lake_root.exists() and any(lake_root.iterdir()):
            raise CommandError(f"{lake_root} exists: the demo starts from a fresh lake; pass a new --workdir")
        work.mkdir(parents=True, exist_ok=True)
        lake = Lake.init(lake_root)
        console.print(f"[bold]1/5[/] fresh lake at {literal(lake_root)}; rolling out {cfg.expert} expert + {cfg.noisy} noisy "
                      f"episodes of {ENV} (train split)")
        expert = policy_rows(ENV, "train", cfg.expert, "expert", seed=cfg.seed, workers=cfg.workers)
        noisy = policy_rows(ENV, "train", cfg.noisy, "noisy", seed=cfg.seed + 100_000, offset=cfg.expert,
                            workers=cfg.workers) if cfg.noisy else []
        lake.append("trajectories", expert + noisy)
        n_skills = _skills_into_lake(lake, work)
        roll = {"expert": len(expert), "expert_success": sum(r["success"] for r in expert) / len(expert),
                "noisy": len(noisy), "noisy_success": sum(r["success"] for r in noisy) / max(1, len(noisy)),
                "skills": n_skills}
        console.print(f"    expert success {roll['expert_success']:.2f}, noisy success {roll['noisy_success']:.2f}, "
                      f"{n_skills} sample skills")
    lap("rollouts", t0)

    # 2. the sft view -> a pinned dataset
    t0 = time.perf_counter()
    ds_dir = work / "dataset_sft"
    manifest = export_view(lake, "sft", ds_dir, format="parquet")
    lap("export", t0)
    env_names = _dataset_envs(ds_dir, console)
    console.print(f"[bold]2/5[/] exported the sft view: {manifest['row_count']} rows of "
                  f"{literal(', '.join(env_names) or 'no env')} -> {literal(ds_dir)} ({times['export']} s)")

    # 3. before
    t0 = time.perf_counter()
    resolve_model(cfg.model)  # the tiny model's build or the SmolLM2 conversion, once: timed apart from the eval
    lap("model", t0)
    name = model_label(cfg.model)
    ev = dict(model=cfg.model, split=cfg.eval_split, offset=cfg.eval_offset, limit=cfg.eval_limit, seed=cfg.seed,
              lake_root=str(lake_root), threads=cfg.threads, device=cfg.device, progress=False)
    t0 = time.perf_counter()
    before = {env: run_eval(EvalSettings(**ev, task=env)) for env in env_names}
    lap("eval_before", t0)
    for env, r in before.items():
        console.print(f"[bold]3/5[/] before, {env}: success {r['success_rate']:.3f}, mean reward {r['mean_reward']:.3f}, "
                      f"valid tool calls {r['valid_tool_call_rate']:.3f}")

    # 4. fine-tune
    t0 = time.perf_counter()
    lora = cfg.lora if cfg.lora is not None else cfg.size != "tiny"
    console.print(f"[bold]4/5[/] fine-tuning {name} ({'LoRA' if lora else 'full'}, {cfg.steps} steps)")
    # LoRA on the from-scratch tiny model needs a larger step than full fine-tuning to move at all
    lr = max(cfg.lr, 2e-3) if lora and cfg.size == "tiny" else cfg.lr
    run = run_sft(SFTConfig(model=cfg.model, data=str(ds_dir), output=str(work / "run"), full=not lora,
                            max_steps=cfg.steps, learning_rate=lr, batch_size=cfg.batch_size, seed=cfg.seed,
                            lake_root=str(lake_root), threads=cfg.threads, device=cfg.device, progress=cfg.progress),
                  console)
    lap("train", t0)

    # 5. after
    t0 = time.perf_counter()
    after = {env: run_eval(EvalSettings(**ev, task=env, adapter=run["run_dir"])) for env in env_names}
    lap("eval_after", t0)
    times["total"] = round(time.perf_counter() - t_start, 2)

    rows = []
    plots = [run["loss_plot"]]
    label = f"after SFT ({run['steps']} steps)"
    for env in env_names:
        for row, r in ((f"{name}, before", before[env]), (f"{name} + SFT ({run['steps']} steps)", after[env])):
            rows.append([env, row, r["episodes"], f"{r['success_rate']:.3f}", f"{r['mean_reward']:.3f}",
                         f"{r['valid_tool_call_rate']:.3f}", f"{r['mean_turns']:.2f}"])
        png = work / ("demo_eval.png" if len(env_names) == 1 else f"demo_eval_{env}.png")
        plots.append(str(write_eval_plot(before[env], after[env], label, png)))
    console.print(table(["environment", "model", "tasks", "success rate", "mean reward", "valid tool calls",
                         "mean turns"], rows, title=f"{cfg.eval_split} split (greedy, seed {cfg.seed})"))
    per_tmpl = {env: _per_template(after[env]) for env in env_names}
    for env, rates in per_tmpl.items():
        console.print(table(["template", "success"], [[k, f"{v:.2f}"] for k, v in sorted(rates.items())],
                            title=f"after, {env}: success by task template"))
    console.print(f"train {run['train_s']:.0f} s, {run['steps']} steps, {run['tokens_per_s']:.0f} tok/s, loss "
                  f"{run['first_loss']:.2f} -> {run['final_loss']:.3f}; plots: {', '.join(plots)}")
    console.print("times (s): " + ", ".join(f"{k} {v}" for k, v in times.items()))
    ui = f"lake ui --lake {lake_root}"  # every episode, the runs and the evaluations, in the browser
    console.print(f"look at what it did: {literal(ui)}, then open http://127.0.0.1:8080/ui")
    result = {"workdir": str(work), "lake": str(lake_root), "ui": ui, "model": name, "lora": lora, "rollouts": roll,
              "evals": {env: {"before": _strip(before[env]), "after": _strip(after[env])} for env in env_names},
              "train": {k: run[k] for k in ("run_id", "steps", "train_s", "tokens_per_s", "first_loss", "final_loss",
                                            "conversations", "adapter_path", "run_dir")},
              "per_template_after": per_tmpl, "times": times, "plots": plots}
    (work / "demo_result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def _strip(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "per_task"}


def _per_template(summary: dict) -> dict:
    import envs

    tmpl = {t.task_id: t.template for t in envs.load_tasks(summary["env"], summary["split"])}
    agg: dict[str, list[int]] = {}
    for r in summary["per_task"]:
        agg.setdefault(tmpl.get(r["task_id"], "?"), []).append(int(r["success"]))
    return {k: sum(v) / len(v) for k, v in agg.items()}


DEMO_OPTIONS = [
    ("model", "--model"), ("workdir", "--workdir"), ("from_lake", "--from-lake"), ("lake_root", "--lake"), ("expert", "--expert"),
    ("noisy", "--noisy"), ("steps", "--steps"), ("eval_limit", "--eval-limit"), ("eval_split", "--eval-split"),
    ("eval_offset", "--eval-offset"), ("lr", "--lr"), ("batch_size", "--batch-size"), ("lora", "--lora/--full"),
    ("workers", "--workers"), ("seed", "--seed"), ("threads", "--threads"), ("device", "--device"),
]


def _demo(values: dict, as_json: bool, quiet: bool) -> None:
    setup_env()
    result = run_demo(DemoConfig(**values, progress=not quiet), new_console(quiet=quiet))
    if as_json:
        print_json(result)


app = config_app("demo", __doc__.splitlines()[0], DemoConfig, DEMO_OPTIONS, _demo)


def main() -> None:
    run(app, prog_name="python -m lachesis.demo")


if __name__ == "__main__":
    main()
