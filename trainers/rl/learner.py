"""The learner of online RL with actor processes: it trains on the rollouts the actors appended to the lake.

`rl_train_online --actors N` (N > 1): trainers/rl/actors.py's N processes play the rollouts; this process reads
them back from the `trajectories` change feed (lake/changes.py, as lake.consumer.Consumer polls it), trains one
update per step on the batches that arrived since its offset (at least as many as there are actors), and
checkpoints after every update: weights, optimizer, RNG and the feed offset in one atomic folder
(trainers/runtime/checkpoint.py), which is also the policy version the actors pick up next. After the checkpoint the offset is registered with the lake as consumer
`rl_learner:<run_id>`, so vacuum keeps what the learner has not read.

Exactly once: a rollout is consumed in the step whose poll first covers its commit; the offset moves with the
model state in the same checkpoint, so after a crash the resumed learner reads from the offset of the state it
resumes (what it trained after that is trained again, from the same rows, and nothing twice in the surviving
state). The log line of each step names the trajectory ids it consumed. A rollout's policy_version (the
checkpoint step it was played with) is always below the step that consumes it. Before the last step the actors
are told to stop and waited for, so every rollout they wrote is consumed by the end of the run.

`train_online` is the entry point of rl_train_online and rl_train_transfer's online method: the in-process loop
of trainers/rl/online.py for --actors 1, this learner otherwise.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from lake.consumer import Checkpoint, Consumer
from trainers.modeling.token_columns import MASKED
from trainers.rl.actors import POLL_S, ActorPool
from trainers.rl.actors import SOURCE as ACTOR_SOURCE
from trainers.rl.curriculum import signal_by_key
from trainers.rl.grpo import SampledSequence, group_advantages
from trainers.rl.online import METHOD, run_online
from trainers.rl.trainer import OnlineTrainer
from trainers.runtime import checkpoint

TABLE = "trajectories"
COLUMNS = ["trajectory_id", "task_id", "group_id", "policy_version", "split", "reward", "success", "tokens", "masks",
           "inference_logprobs", "metadata"]


class LakeLearner(OnlineTrainer):
    """OnlineTrainer whose steps consume the actors' rollouts from the lake instead of playing them."""

    def __init__(self, cfg, hp, spec, run, resume_from: Path | None = None):
        super().__init__(cfg, hp, spec, run, resume_from)
        self.checkpoint_every, self.keep_checkpoints = 1, 4  # every update is a policy version the actors load
        self.consumer_name = f"rl_learner:{self.run_id}"
        # poll() only: the offset is saved in the training checkpoint (with the weights), not by Consumer.commit
        self.feed = Consumer(run.lake.table_set, self.consumer_name, TABLE, run.path / "consumer.json")
        # a new run reads from the lake's version at its start; a resumed one from its checkpoint's offset
        self.offset = (checkpoint.read_state(resume_from, ("lake_offset",))["lake_offset"] if resume_from
                       else run.lake.version(TABLE))
        if cfg.ray:  # Ray actors on a cluster's nodes (trainers/rl/ray_actors.py): the same loop, placed there
            from trainers.rl.ray_actors import RayActorPool

            self.pool = RayActorPool(cfg, str(run.lake.root), run.path)
        else:
            self.pool = ActorPool(run.path, cfg.actors, cfg.threads)

    def rollout_plan(self) -> str:
        where = f"Ray actors on {self.cfg.ray}" if self.cfg.ray else "actor processes"
        return (f"{self.cfg.actors} {where}, each {self.hp.batch_size} tasks x {self.hp.group_size} rollouts "
                "per policy version, read back from the lake")

    # -------------------------------------------------------------------------------- the actors
    def before_steps(self) -> None:
        latest = checkpoint.latest(self.run.path)
        if latest is None:  # policy version 0, what the actors start from; no runs
            self.save_checkpoint(0, record=False)     # event (its seq is the first evaluation's, written next)
        else:  # a resumed run: its newest version, for actors that do not read the run folder
            self.pool.publish(checkpoint.step_of(latest), latest)
        self.pool.start()  # the actors load while the learner evaluates the starting policy

    def run_all(self, progress=None) -> dict:
        try:
            summary = super().run_all(progress)
        finally:
            self.pool.kill()  # stopped before the last step; killed here only when the learner failed
        return {**summary, **self.pool.report()}  # Ray actors: where they ran, how many were replaced

    # -------------------------------------------------------------------------------- the change feed
    def _poll(self) -> list[dict]:
        """This run's actor rollouts committed since the offset (other writers' rows are passed over)."""
        batch = self.feed.poll(Checkpoint(self.offset))
        if batch is None:
            return []
        self.offset = batch.upto
        rows = []
        for r in batch.rows.select(COLUMNS).to_pylist():
            meta = json.loads(r["metadata"] or "{}")
            if meta.get("train_run_id") == self.run_id and meta.get("source") == ACTOR_SOURCE and r["split"] == "train":
                rows.append(r)
        return rows

    def gather(self, last: bool) -> list[dict]:
        """At least as many actor batches as there are actors (every batch that arrived is taken), so an update
        sees as much data whatever the actors' speeds; before the last step, also every batch the stopped actors
        had in flight. No deadlock: every actor plays the newest version once, and that version was published
        after the previous step's poll, so its N batches are all still to come."""
        want = self.cfg.actors * self.hp.batch_size * self.hp.group_size
        rows = self._poll()
        while len(rows) < want:
            self.pool.check()
            time.sleep(POLL_S)
            rows += self._poll()
        if last:
            self.pool.stop()
            rows += self._poll()
        return rows

    # -------------------------------------------------------------------------------- one step
    def train_step(self, step: int) -> dict:
        t0 = time.perf_counter()
        rows = self.gather(last=step == self.cfg.steps)
        wait_s = time.perf_counter() - t0
        groups = {g: i for i, g in enumerate(dict.fromkeys(r["group_id"] for r in rows))}
        returns = [float(r["reward"] or 0.0) for r in rows]
        seqs = [SampledSequence(list(r["tokens"]), [int(m != MASKED) for m in r["masks"]], advantage=a,
                                logprobs=r["inference_logprobs"])
                for r, a in zip(rows, group_advantages(returns, [groups[r["group_id"]] for r in rows]))]
        sig = signal_by_key(seqs, [r["group_id"] for r in rows], returns, drop=self.cfg.drop_zero_variance)
        if self.cfg.curriculum:  # the next checkpoint carries the new state to the actors
            self.stream.observe_outcomes((self.stream.family_of_id.get(r["task_id"], r["task_id"]), bool(r["success"]))
                                         for r in rows)
        stats, grad_norm, lr, update_s = self.update(sig.kept)
        versions = [int(r["policy_version"]) for r in rows]
        n = len(rows)
        t = self.totals
        t["rollouts"] += n
        t["rollout_s"] += wait_s + update_s  # actors play while the learner updates: rollouts/s over the step's time
        t["update_s"] += update_s
        t["train_tokens"] += stats.tokens
        t["sampled_tokens"] += stats.sampled_tokens
        episode_tokens = sum(len(s.ids) for s in seqs)
        t["episode_tokens"] += episode_tokens
        mean = sum(returns) / n
        ids = [r["trajectory_id"] for r in rows]
        rec = {"step": step, "policy_version": step - 1, "loss": round(stats.loss, 6), "pg_loss": round(stats.pg_loss, 6),
               "kl": round(stats.kl, 6), "reward_mean": round(mean, 5),
               "reward_std": round((sum((r - mean) ** 2 for r in returns) / n) ** 0.5, 5),
               "logprob_drift": round(stats.logprob_drift, 6), "tis_weight": round(stats.tis_weight, 6),
               "success_rate": sum(bool(r["success"]) for r in rows) / n, "trained_episodes": stats.sequences,
               "sampled_tokens": stats.sampled_tokens, "tokens": stats.tokens, "episode_tokens": episode_tokens,
               "grad_norm": round(grad_norm, 5), "lr": lr, "wait_s": round(wait_s, 3), "update_s": round(update_s, 3),
               "consumed": n, "rollout_versions": sorted(set(versions)), "max_staleness": step - 1 - min(versions),
               "lake_offset": self.offset, "consumed_ids": ids,
               "rollouts_digest": hashlib.sha256("\x00".join(sorted(ids)).encode()).hexdigest()[:16],
               **self.signal_fields(step, sig)}
        self.train_returns.append((step, rec["reward_mean"]))
        self.log(rec)
        return rec

    # -------------------------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict:
        return {"lake_offset": self.offset}

    def save_checkpoint(self, step: int, record: bool = True) -> Path:
        path = super().save_checkpoint(step, record)
        self.run.lake.register_consumer(self.consumer_name, {TABLE: self.offset})  # after the state: never ahead
        self.pool.publish(step, path)  # the next policy version (Ray actors get it through the object store)
        return path


def make_trainer(cfg, hp, spec, run, resume_from: Path | None = None) -> OnlineTrainer:
    """The in-process loop for --actors 1, the learner of actor processes (or of Ray actors: --ray) otherwise."""
    cls = LakeLearner if cfg.actors > 1 or cfg.ray else OnlineTrainer
    return cls(cfg, hp, spec, run, resume_from)


def train_online(cfg, console=None, method: str = METHOD) -> dict:
    """rl_train_online and rl_train_transfer's online method, with or without actor processes."""
    return run_online(cfg, console, method, make_trainer=make_trainer)

