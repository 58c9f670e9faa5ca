"""rl_train_online: GRPO-style online RL through an environment; every rollout and evaluation goes to the lake.

Each step plays `batch_size` train tasks x `group_size` sampled episodes (multi-turn tool calls; an episode ends
when the environment says so or at `max_turns`), normalises the returns within each task's group and takes one
policy-gradient step on the assistant's tokens (trainers/rl/grpo.py). The hyperparameters come from the project
config (lachesis.toml, trainers/rl/project_config.py); the run folder records the config it ran with.

Why our own loop and not trl's GRPOTrainer (docs/training-notes.md section 5 compares them on these envs):
- episodes are multi-turn and end when the environment says so (submit, a reply without a tool call) or at
  max_turns. GRPOTrainer's `environment_factory` ends an episode when the model stops calling tools and caps the
  whole episode by max_completion_length; its `rollout_func` would run our own rollout anyway (B3d), inside an
  API trl marks experimental ("may change or be removed");
- generation is hermes_eval's batched token-in/token-out path (trainers/generation/generate.py: one batched call per turn
  for every live episode, the KV cache kept across turns, the chat template's own continuation), so training and
  evaluation see the same prompts;
- every rollout goes to the lake with its policy_version and per-step rewards through an idempotent writer
  (one writer id per run, seq = the step), and `--resume` continues at the same step and data position with the
  optimizer, scheduler and RNG states: a kill -9 then --resume neither repeats nor skips a step, in the lake or
  in the log. GRPOTrainer's resume (HF Trainer checkpoints) knows neither our lake writes nor a position in the
  environment's task stream;
- transfer's layer freezing and the environments' per-step rewards need no trainer hooks.
What it gives up: trl's vLLM generation and DeepSpeed/FSDP wiring (plain PyTorch on one device). Rollouts are
played in this process; with `--actors N` they come from N actor processes through the lake instead
(trainers/rl/actors.py plays them, trainers/rl/learner.py trains on them: the same batches, rows and updates).
bench/bench_online.py measures this loop against a plain GRPOTrainer on the same model and tasks.

policy_version of a rollout = the step counter when it was sampled (the number of updates its weights had):
the rollouts of step s (1-based) carry s-1, the evaluation after step s carries s (step 0 = before training).
Evaluations score the environment's default reward (unshaped: comparable across reward settings); training
uses the configured per-step rewards and reward_scale.

This module starts a run (or resumes a stopped one) and runs it; the task stream and a step's groups are
trainers/rl/groups.py's, the trainer (one step, evaluations, checkpoints, the summary) trainers/rl/trainer.py's.
"""
from __future__ import annotations

from dataclasses import asdict, fields, replace
from pathlib import Path

from trainers.eval.evaluate import load_eval_tasks
from trainers.modeling.models import untrained_note
from trainers.modeling.policy import PolicySpec, resolve_spec
from trainers.rl.config import OnlineConfig
from trainers.rl.project_config import ProjectConfig, load_config
from trainers.rl.trainer import SOURCE, OnlineTrainer
from trainers.runtime import checkpoint
from trainers.runtime.device import device as pick_device
from trainers.runtime.device import setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.run_reader import RunReader
from trainers.runtime.runfolder import RunFolder

METHOD = "online"


def settle_project(cfg: OnlineConfig) -> ProjectConfig:
    """The project config this run trains with (--config or lachesis.toml), with --seed applied."""
    hp = load_config(cfg.config)
    return replace(hp, seed=cfg.seed) if cfg.seed is not None else hp


def read_run_config(folder: Path, resuming_as: type[OnlineConfig] | None = None) -> OnlineConfig:
    """The config a stopped run recorded: its online RL fields (what an actor process plays by), or with
    `resuming_as`, the whole config as that class (OnlineConfig, or rl_train_transfer's subclass). Resumed by a command
    other than the one that started it, a run would lose what that command adds (a transfer's frozen layers): a
    one-line error naming the command to use."""
    raw = RunReader(Path(folder), "--resume").run_config()
    cls = resuming_as or OnlineConfig
    started_by = raw.get("command")
    if resuming_as is not None and started_by not in (None, cls.COMMAND):
        raise TrainerInputError(f"--resume {folder}: the run was started by {started_by}; resume it with "
                                f"`{started_by} --resume {folder}`")
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in raw.items() if k in names and k != "resume"}, resume=str(folder))


def start(cfg: OnlineConfig, method: str = METHOD, make_trainer=OnlineTrainer) -> OnlineTrainer:
    """A new run (folder, settled config, policy) or, with cfg.resume, the stopped run at its latest checkpoint.
    `make_trainer(cfg, hp, spec, run, resume_from=None)` builds the trainer (trainers/rl/learner.py: the learner of
    actor processes when cfg.actors > 1)."""
    setup_env()
    pick_device(cfg.device)  # --device cuda where there is none: the one-line error before any work
    if cfg.resume:
        stopped = RunReader.open(cfg.resume, "--resume", by_id=True)
        stopped.require_config()  # a folder that is no run: one line, before anything is read from it
        folder = stopped.path
        rec = read_run_config(folder, type(cfg))
        if (folder / "summary.json").is_file():
            raise TrainerInputError(f"{folder} is a completed run (summary.json): nothing to resume; start a new run "
                                    "with --init to train on from it")
        skipped: list[str] = []  # broken newer checkpoints, set aside: said, never a silent rewind
        ckpt = checkpoint.usable(folder, ("run_id", "position", "log_lines", "totals"), report=skipped.append,
                                 set_aside=True)
        if ckpt is None:
            raise TrainerInputError(f"{folder} has no checkpoint yet (the run stopped before its first one): start "
                                    "it again without --resume")
        # --ray given again names the cluster now (the one the run started on may be gone)
        rec = replace(rec, threads=cfg.threads or rec.threads, device=cfg.device, progress=cfg.progress,
                      ray=cfg.ray or rec.ray)
        hp = ProjectConfig(**rec.project)
        spec = PolicySpec(**rec.policy)
        state = checkpoint.read_state(ckpt)
        run = RunFolder.reopen(folder, state["run_id"], rec, method, SOURCE, state["log_lines"])
        for line in [*skipped, f"resuming from {ckpt.name}: the steps after it are trained again"] if skipped else []:
            run.warn(line)
        run.write_config(rec, spec.base)
        run.start_reporting(rec.report_to)
        return make_trainer(rec, hp, spec, run, resume_from=ckpt)
    hp = settle_project(cfg)
    run = RunFolder.create(cfg, method, SOURCE)
    with run.setting_up():
        spec = resolve_spec(cfg.model, cfg.init, hp.lora_rank, hp.lora_alpha, cfg.freeze_layers)
        cfg = replace(cfg, run_id=run.run_id, full=spec.full, project=asdict(hp), policy=asdict(spec),
                      ray=cfg.ray or hp.ray or None)  # --ray, else the project file's key
        run.write_manifest({"env": cfg.env, "tasks_file": cfg.tasks_file, "init": cfg.init,
                            "train_tasks": len(load_eval_tasks(cfg.env, "train", cfg.tasks_file))})
        run.write_config(cfg, spec.base)
        run.start_reporting(cfg.report_to)
        trainer = make_trainer(cfg, hp, spec, run)
    return trainer


def run_online(cfg: OnlineConfig, console=None, method: str = METHOD, make_trainer=OnlineTrainer) -> dict:
    """rl_train_online (and rl_train_transfer's online method): train, evaluate, checkpoint; returns the summary.
    Rollouts in this process; trainers/rl/learner.py's `train_online` also runs them in actor processes."""
    trainer = start(cfg, method, make_trainer)
    if console is not None:
        hp = trainer.hp
        from rich.markup import escape  # run ids and paths are user text, not markup

        console.print(f"[bold]{trainer.cfg.COMMAND}[/] " + escape(
                      f"{trainer.run_id} on {trainer.cfg.env}: step {trainer.step} -> "
                      f"{trainer.cfg.steps}, {trainer.rollout_plan()}, "
                      f"{'full' if trainer.spec.full else 'LoRA'} ({sum(p.numel() for p in trainer.params):,} trainable), "
                      f"lr {hp.learning_rate:g}, run folder {trainer.run.path}"), highlight=False)
        note = None if trainer.cfg.resume else untrained_note(trainer.cfg.model, "--init", trainer.cfg.init)
        if note:
            console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    if not trainer.cfg.progress:
        return trainer.run_all()
    from trainers.runtime.progress import Progress

    with Progress(console, "online", trainer.cfg.steps, completed=trainer.step) as prog:

        def on_step(step, rec):
            prog.update(step, info=f"return {rec['reward_mean']:.3f} · success {rec['success_rate']:.2f}")

        return trainer.run_all(on_step)
