"""A step's rollouts in online RL: the train tasks in a seeded order (`TaskStream`), each of `batch_size` tasks
played `group_size` times with the policy's samples and the returns normalised within each task's group
(`play_groups`), and the lake rows of those rollouts with their token columns (`rollout_rows`).

The in-process trainer (trainers/rl/trainer.py) and the actor processes (trainers/rl/actors.py) play and record
their steps through these, so both produce the same episodes and rows for the same seeds.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

import envs
from envs.core.episode import EpisodeLost
from trainers.eval.config import EvalSettings
from trainers.generation.episodes import play
from trainers.generation.generate import Sampling, Turns
from trainers.modeling.token_columns import token_columns
from trainers.rl.config import OnlineConfig
from trainers.rl.grpo import group_advantages
from trainers.rl.project_config import ProjectConfig, completion_tokens, reward_weights
from trainers.rl.rollout import Rollout

GENERATE_BATCH = 64  # episodes generated together (all of a step's episodes for the usual batch x group sizes)


class TaskStream:
    """The train tasks in a seeded order, epoch after epoch: position p is task order_{p // n}[p % n]. A run's
    data position is an integer (steps done x batch_size), so a resumed run draws the same tasks next."""

    def __init__(self, tasks: list[envs.Task], seed: int):
        self.tasks, self.seed = tasks, seed
        self._orders: dict[int, list[int]] = {}

    def at(self, position: int) -> envs.Task:
        epoch, i = divmod(position, len(self.tasks))
        if epoch not in self._orders:
            order = list(range(len(self.tasks)))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._orders = {epoch: order}
        return self.tasks[self._orders[epoch][i]]


# ----------------------------------------------------------------------------------------------- rollouts
@dataclass
class StepResult:
    rollouts: list[Rollout]
    rollout_s: float
    generate_s: float


def play_groups(model, tok, cfg: OnlineConfig, hp: ProjectConfig, stream: TaskStream, position: int,
                seed_key: int, generate=None) -> StepResult:
    """`batch_size` tasks from `position` of the stream, each played `group_size` times with the policy's samples
    (group b = the task at position + b); episode seeds come from the project seed and `seed_key` (the step, or
    an actor's batch), so the same key replays the same episodes. `model` generates them (generation.Turns: the
    KV kept across turns); `generate` replaces that (bench/bench_generation.py's plain path)."""
    t0 = time.perf_counter()
    eps = []
    for b in range(hp.batch_size):
        task = stream.at(position + b)
        # a task file was read once (the stream holds its tasks): each environment gets its own task only
        env_kw = {"tasks": [task]} if cfg.tasks_file else {"split": "train"}
        for g in range(hp.group_size):
            seed = (hp.seed * 1_000_003 + seed_key) * 10_007 + b * hp.group_size + g
            env = envs.make(cfg.env, max_steps=hp.max_turns, reward_weights=reward_weights(hp), **env_kw)
            try:
                eps.append(Rollout(env, task.task_id, seed, tok, group=b))
            except EpisodeLost:  # every reset failed in the environment: the group goes on one member short
                env.close()
    s = EvalSettings(task=cfg.env, batch_size=GENERATE_BATCH, max_context=cfg.max_context,
                     max_turns=hp.max_turns, tasks_file=cfg.tasks_file)
    model.eval()
    # sampling draws from torch's global RNG, which checkpoints save and --resume restores
    gen = Turns(model, tok, Sampling(max_new_tokens=completion_tokens(hp, cfg.env), temperature=hp.temperature,
                                     stop_repetition=hp.stop_repetition))
    try:
        gen_s = play(eps, generate or gen, tok, s.batch_size, s.max_context, forget=None if generate else gen.forget)
    finally:
        for e in eps:
            e.env.close()
    returns = [e.recorder.reward for e in eps]
    for e, a in zip(eps, group_advantages(returns, [e.group for e in eps])):
        e.advantage = a
    return StepResult(eps, time.perf_counter() - t0, gen_s)


def rollout_rows(res: StepResult, label: str, hp: ProjectConfig, source: str, version: str, group_prefix: str,
                 position: int, metadata: dict) -> list[dict]:
    """The lake rows of a step's rollouts: policy_version, per-step rewards, the group, and the token ids with
    the sampled ones marked and their sampling log-probs (`tokens`, `masks`, `inference_logprobs` in Atropos'
    conventions, trainers/modeling/token_columns.py), so a learner in another process trains on exactly what the
    actor sampled, with the same importance-sampling correction."""
    rows = []
    for e in res.rollouts:
        ids, sampled = e.sequence()
        rec = e.recorder.record(
            model=label, policy_version=version, source=source, group_id=f"{group_prefix}/{e.group}", seed=e.seed,
            metadata={**metadata, "advantage": e.advantage, "temperature": hp.temperature,
                      "reward_scale": hp.reward_scale, "data_position": position + e.group})
        rows.append({**rec, **token_columns(ids, sampled, e.inference_logprobs())})
    return rows
