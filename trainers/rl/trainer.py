"""The in-process trainer of online RL (`OnlineTrainer`): one run's folder, policy, optimizer, task stream and lake
writer; each step plays its groups (trainers/rl/groups.py), writes them to the lake and takes one GRPO update
(trainers/rl/grpo.py); evaluations, checkpoints and the summary as trainers/rl/online.py's docstring describes.

trainers/rl/learner.py's LakeLearner subclasses it to train on the actors' rollouts instead of playing them
(it overrides `train_step`, `run_all` and `save_checkpoint`, and the hooks `rollout_plan`, `before_steps` and
`checkpoint_state`).
"""
from __future__ import annotations

import hashlib
import json
import time
import warnings
from dataclasses import asdict
from pathlib import Path

from ground.jsonl import read_jsonl
from trainers.eval.config import EvalSettings
from trainers.eval.evaluate import evaluate_model, load_eval_tasks
from trainers.generation.generate import rollout_model, use_bf16
from trainers.modeling.freeze import checksums, freeze_report, model_depth, trainable_names
from trainers.modeling.models import checkpoint_activations, model_label
from trainers.modeling.policy import PolicySpec, build_policy, tokenizer_for
from trainers.rl.config import OnlineConfig
from trainers.rl.curriculum import curriculum_stream, signal_groups
from trainers.rl.grpo import policy_update
from trainers.rl.groups import StepResult, TaskStream, play_groups, rollout_rows
from trainers.rl.project_config import ProjectConfig, completion_tokens
from trainers.rl.rollout import Rollout
from trainers.runtime import checkpoint
from trainers.runtime.device import device as pick_device
from trainers.runtime.device import set_threads
from trainers.runtime.interrupt import TrainingInterrupted, resume_hint, stop_on_interrupt
from trainers.runtime.runfolder import RunFolder

SOURCE = "rl_train_online"
EVAL_BATCH = 64


class OnlineTrainer:
    """One run: its folder, policy, optimizer, task stream and lake writer. `run_all()` trains to the last step."""

    def __init__(self, cfg: OnlineConfig, hp: ProjectConfig, spec: PolicySpec, run: RunFolder,
                 resume_from: Path | None = None):
        import torch

        self.cfg, self.hp, self.spec, self.run = cfg, hp, spec, run
        self.run_id = run.run_id
        self.label = model_label(cfg.model)
        set_threads(cfg.threads)
        self.device = pick_device(cfg.device)
        self.bf16 = use_bf16(cfg.bf16, self.device)
        torch.manual_seed(hp.seed)
        self.tok = tokenizer_for(spec)
        weights = str(checkpoint.weights(resume_from)) if resume_from else None
        self.model, self.frozen = build_policy(spec, weights, self.device)
        if cfg.gradient_checkpointing:
            checkpoint_activations(self.model)
        self.ref = self._reference() if hp.kl_beta > 0 else None
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=hp.learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
        warm = min(10, cfg.steps // 10)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        train_tasks = load_eval_tasks(cfg.env, "train", cfg.tasks_file)
        self.stream = (curriculum_stream(cfg, hp.group_size, train_tasks, hp.seed, run.lake, self.label)
                       if cfg.curriculum else TaskStream(train_tasks, hp.seed))
        self.signal: list[tuple[int, float]] = []  # the fraction of each step's groups with a signal
        self.test_tasks = load_eval_tasks(cfg.env, "test", cfg.tasks_file)[: hp.eval_episodes]
        self.writer = run.lake.writer(f"{SOURCE}:{self.run_id}")
        self._pending = None
        self.log_lines = 0
        self.step, self.position = 0, 0
        self.checkpoint_every, self.keep_checkpoints = hp.checkpoint_every, 2
        self.last_checkpoint = time.monotonic()  # this process's start counts as one for checkpoint_minutes
        self.evals: list[dict] = []
        self.train_returns: list[tuple[int, float]] = []
        self.totals = {"rollouts": 0, "rollout_s": 0.0, "update_s": 0.0, "train_tokens": 0, "sampled_tokens": 0,
                       "episode_tokens": 0}
        if resume_from:
            checkpoint.load_into(resume_from, self.opt, self.sched)  # RNG states too
            state = checkpoint.read_state(resume_from)
            self.step, self.position, self.log_lines = state["step"], state["position"], state["log_lines"]
            self.totals = state["totals"]
            if cfg.curriculum:
                self.stream.load_state(state.get("curriculum") or {})
            self._reload_history()
        self._hashes_before = self._start_hashes(resume_from is not None)

    # -------------------------------------------------------------------------------- setup helpers
    def _reference(self):
        """The initial policy, frozen: the KL penalty's reference (rebuilt from the spec on resume)."""
        ref, _ = build_policy(self.spec, device=self.device)
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref.eval()

    def _reload_history(self) -> None:
        for rec in read_jsonl(self.run.log_path)[0]:
            if rec.get("eval"):
                self.evals.append(rec)
            elif "reward_mean" in rec:
                self.train_returns.append((rec["step"], rec["reward_mean"]))
                if "signal_groups" in rec:
                    self.signal.append((rec["step"], rec["signal_groups"]))

    def _start_hashes(self, resumed: bool) -> dict | None:
        """Checksums of the frozen and trained tensors at the run's start (a resumed run reads the first start's)."""
        if not self.spec.freeze:
            return None
        path = self.run.path / "checksums_start.json"
        if resumed and path.is_file():
            return json.loads(path.read_text())
        hashes = {"frozen": checksums(self.model, self.frozen), "trained": checksums(self.model, trainable_names(self.model))}
        path.write_text(json.dumps(hashes, indent=1))
        return hashes

    def log(self, rec: dict) -> None:
        self.run.log(rec)
        self.log_lines += 1

    # -------------------------------------------------------------------------------- lake
    def _write(self, table: str, rows: list[dict], seq: int) -> None:
        """Queue one idempotent append (the previous one must have committed first: seqs commit in order)."""
        self.flush()
        self._pending = self.writer.submit(table, rows, seq=seq)

    def flush(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    # -------------------------------------------------------------------------------- one step
    def generation_model(self):
        """The policy to generate with now: itself, or its merged bf16 copy (a snapshot of the current weights)."""
        return rollout_model(self.model, self.bf16)

    def rollouts(self, step: int) -> StepResult:
        return play_groups(self.generation_model(), self.tok, self.cfg, self.hp, self.stream, self.position, step)

    def rollout_records(self, step: int, res: StepResult) -> list[dict]:
        return rollout_rows(res, self.label, self.hp, SOURCE, str(step - 1), f"{self.run_id}/{step}",
                            self.position, {"train_run_id": self.run_id, "step": step})

    def update(self, rollouts: list[Rollout]):
        """One optimizer step on the batch's GRPO loss (none when no group had a signal); the schedule advances."""
        t0 = time.perf_counter()
        # the shared prefix hands its KV cache to the suffixes, which a checkpointed forward turns off
        stats, grad_norm = policy_update(self.model, self.params, self.opt, rollouts, self.tok.pad_token_id,
                                         self.cfg.micro_batch, self.hp.kl_beta, self.ref, bf16=self.bf16,
                                         share_prefix=not self.cfg.gradient_checkpointing, tis_cap=self.cfg.tis_cap,
                                         loss_type=self.hp.loss_type)
        lr = self.sched.get_last_lr()[0]
        with warnings.catch_warnings():  # a step without an update (no group had a signal) still advances the schedule
            warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*before.*optimizer.step")
            self.sched.step()
        return stats, grad_norm, lr, time.perf_counter() - t0

    def train_step(self, step: int) -> dict:
        res = self.rollouts(step)
        returns = [e.recorder.reward for e in res.rollouts]
        self._write("trajectories", self.rollout_records(step, res), seq=2 * step)
        sig = signal_groups(res.rollouts, drop=self.cfg.drop_zero_variance)  # DAPO's dynamic sampling
        if self.cfg.curriculum:
            self.stream.observe(res.rollouts)
        stats, grad_norm, lr, update_s = self.update(sig.kept)
        self.position += self.hp.batch_size
        n = len(res.rollouts)
        t = self.totals
        t["rollouts"] += n
        t["rollout_s"] += res.rollout_s
        t["update_s"] += update_s
        t["train_tokens"] += stats.tokens
        t["sampled_tokens"] += stats.sampled_tokens
        episode_tokens = sum(len(e.ids) + len(e.tail) for e in res.rollouts)
        t["episode_tokens"] += episode_tokens
        mean = sum(returns) / n
        digest = hashlib.sha256("\x00".join(s["action"] for e in res.rollouts for s in e.recorder.steps).encode())
        rec = {"step": step, "policy_version": step - 1, "loss": round(stats.loss, 6), "pg_loss": round(stats.pg_loss, 6),
               "kl": round(stats.kl, 6), "reward_mean": round(mean, 5),
               "reward_std": round((sum((r - mean) ** 2 for r in returns) / n) ** 0.5, 5),
               "success_rate": sum(e.recorder.success for e in res.rollouts) / n,
               "trained_episodes": stats.sequences, "sampled_tokens": stats.sampled_tokens, "tokens": stats.tokens,
               "logprob_drift": round(stats.logprob_drift, 6), "tis_weight": round(stats.tis_weight, 6),
               "episode_tokens": episode_tokens, "turns": sum(e.turns for e in res.rollouts),
               "grad_norm": round(grad_norm, 5), "lr": lr, "rollout_s": round(res.rollout_s, 3),
               "generate_s": round(res.generate_s, 3), "update_s": round(update_s, 3),
               "data_position": self.position, "rollouts_digest": digest.hexdigest()[:16], **self.signal_fields(step, sig)}
        self.train_returns.append((step, rec["reward_mean"]))
        self.log(rec)
        return rec

    def signal_fields(self, step: int, sig) -> dict:
        """A step's log fields of dynamic sampling and the curriculum (this loop and the actors' learner); the
        signal fraction also goes to eval_curve.png."""
        self.signal.append((step, round(sig.fraction, 4)))
        out = {"groups": sig.groups, "signal_groups": round(sig.fraction, 4),
               "dropped_groups": sig.dropped if self.cfg.drop_zero_variance else 0}
        if self.cfg.curriculum:
            out["curriculum_top"] = self.stream.summary()
        return out

    # -------------------------------------------------------------------------------- evaluation + checkpoints
    def evaluate(self, step: int) -> dict:
        hp = self.hp
        s = EvalSettings(model=self.cfg.model, task=self.cfg.env, split="test", seed=hp.seed,
                         max_new_tokens=completion_tokens(hp, self.cfg.env), stop_repetition=hp.stop_repetition,
                         max_turns=hp.max_turns,
                         max_context=self.cfg.max_context, batch_size=EVAL_BATCH, tasks_file=self.cfg.tasks_file,
                         record_in_lake=False, progress=False)
        eval_id = f"{self.run_id}-eval-{step:06d}"
        self.model.eval()
        summary, episodes = evaluate_model(self.generation_model(), self.tok, s, self.test_tasks, run_id=eval_id,
                                           label=self.label)
        rows = [e.recorder.record(model=self.label, policy_version=str(step), source=SOURCE, group_id=eval_id,
                                  seed=e.seed, metadata={"eval_run_id": eval_id, "train_run_id": self.run_id, "step": step})
                for e in episodes]
        self._write("trajectories", rows, seq=2 * step + 1)
        metrics = {k: summary[k] for k in ("env", "split", "episodes", "success_rate", "mean_reward",
                                           "valid_tool_call_rate", "first_call_valid_rate", "repetition_stops",
                                           "length_stops", "mean_turns", "wall_s", "generate_s", "seed")}
        metrics.update(step=step, policy_version=step, train_run_id=self.run_id)
        self._write("runs", [{"run_id": eval_id, "kind": "eval", "status": "completed", "model": self.label,
                              "adapter_path": None, "config": asdict(s), "metrics": metrics,
                              "metadata": {"train_run_id": self.run_id, "step": step, "env": self.cfg.env,
                                           "split": "test", "command": self.cfg.COMMAND, "per_task": summary["per_task"]}}],
                    seq=2 * step)
        point = {"eval": True, "step": step, **{k: metrics[k] for k in (
            "success_rate", "mean_reward", "valid_tool_call_rate", "first_call_valid_rate", "mean_turns")}}
        self.evals.append(point)
        self.log(point)
        return point

    def checkpoint_due(self) -> bool:
        """The last checkpoint (or this process's start) is `checkpoint_minutes` old: a step of minutes on a CPU
        would otherwise leave hours of a run behind checkpoint_every's next multiple."""
        minutes = self.hp.checkpoint_minutes
        return minutes > 0 and time.monotonic() - self.last_checkpoint >= 60 * minutes

    def save_checkpoint(self, step: int, record: bool = True) -> Path:
        """The atomic checkpoint of `step`, then (`record`) its `runs` event."""
        self.last_checkpoint = time.monotonic()
        self.flush()  # the lake holds every rollout up to this step before the checkpoint says so
        state = {"run_id": self.run_id, "position": self.position, "log_lines": self.log_lines, "totals": self.totals,
                 "curriculum": self.stream.state() if self.cfg.curriculum else None, **self.checkpoint_state()}
        path = checkpoint.save(self.run.path, step, self.model.save_pretrained, self.opt, self.sched, state,
                               keep=self.keep_checkpoints)
        if not record:
            return path
        self._write("runs", [{"run_id": self.run_id, "kind": "checkpoint", "status": "completed", "model": self.label,
                              "adapter_path": str(checkpoint.weights(path).resolve()), "config": asdict(self.cfg),
                              "metrics": {"step": step}, "metadata": {"env": self.cfg.env, "step": step,
                                                                     "run_dir": str(self.run.path.resolve()),
                                                                     "command": self.cfg.COMMAND}}],
                    seq=2 * step + 1)
        self.flush()
        return path

    def rollout_plan(self) -> str:
        return f"{self.hp.batch_size} tasks x {self.hp.group_size} rollouts per step"

    def before_steps(self) -> None:
        """Called once before this process's first evaluation and step (the learner starts its actors here)."""

    def checkpoint_state(self) -> dict:
        """What a subclass adds to a checkpoint's state.json (the learner: its lake offset)."""
        return {}

    # -------------------------------------------------------------------------------- the run
    def run_all(self, progress=None) -> dict:
        cfg = self.cfg
        try:
            with stop_on_interrupt("this step") as stop:  # Ctrl-C: finish the step, checkpoint it, stop
                self.before_steps()
                if self.step == 0:
                    self.evaluate(0)
                for step in range(self.step + 1, cfg.steps + 1):
                    rec = self.train_step(step)
                    self.step = step
                    if step % cfg.eval_interval == 0 or step == cfg.steps:
                        self.evaluate(step)
                    if (step % self.checkpoint_every == 0 or step == cfg.steps or stop.requested
                            or self.checkpoint_due()):
                        self.save_checkpoint(step)
                    if progress:
                        progress(step, rec)
                    if stop.requested and step < cfg.steps:
                        raise KeyboardInterrupt
            self.flush()
        except KeyboardInterrupt:
            raise self.interrupted() from None
        return self.finish()

    def interrupted(self) -> TrainingInterrupted:
        """What stopped it, where, and the command that resumes it (its own: rl_train_transfer for a transfer)."""
        ckpt = checkpoint.latest(self.run.path)
        at = checkpoint.step_of(ckpt) if ckpt else None
        return TrainingInterrupted(resume_hint(self.cfg.COMMAND, self.run.path, self.step or None, at))

    def finish(self) -> dict:
        cfg, t = self.cfg, self.totals
        extra: dict = {}
        if self._hashes_before is not None:
            extra = self._write_checksums()
        self.run.save_model(self.model.save_pretrained, self.tok, self.spec.full)
        if cfg.plot and self.evals:
            from trainers.runtime.plots import write_eval_curve  # matplotlib only where a plot is drawn

            write_eval_curve(self.evals, self.train_returns, self.run.path / "eval_curve.png", signal=self.signal,
                             title=f"{self.run_id}: {cfg.env} ({self.label})")
        first, last = self.evals[0], self.evals[-1]
        metrics = {"steps": self.step, "env": cfg.env, "rollouts": t["rollouts"],
                   "rollouts_per_s": round(t["rollouts"] / max(t["rollout_s"], 1e-9), 3),
                   "train_tokens_per_s": round(t["train_tokens"] / max(t["update_s"], 1e-9), 1),
                   "rollout_s": round(t["rollout_s"], 2), "update_s": round(t["update_s"], 2),
                   "success_before": first["success_rate"], "success_after": last["success_rate"],
                   "reward_before": first["mean_reward"], "reward_after": last["mean_reward"],
                   "valid_calls_before": first["valid_tool_call_rate"], "valid_calls_after": last["valid_tool_call_rate"],
                   "eval_points": len(self.evals), **extra}
        return self.run.finish(metrics, self.label, f"env:{cfg.env}", eval_curve=str(self.run.path / "eval_curve.png"),
                               learning_rate=self.hp.learning_rate)

    def _write_checksums(self) -> dict:
        before = self._hashes_before
        after_frozen = checksums(self.model, list(before["frozen"]))
        after_trained = checksums(self.model, list(before["trained"]))
        report = freeze_report(before["frozen"], after_frozen, before["trained"], after_trained, self.spec.layers,
                               model_depth(self.model), "full" if self.spec.full else "lora")
        self.run.write_json("frozen_checksums.json", report)
        return {"frozen_identical": report["frozen_identical"], "frozen_tensors": report["frozen_tensors"],
                "trained_tensors": report["trained_tensors"], "trained_changed": report["trained_changed"]}
