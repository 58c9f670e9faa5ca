"""Online RL that gets signal (issue 24 item 3): a curriculum that picks the train tasks the current policy solves
sometimes, and DAPO's dynamic sampling, which drops the groups whose returns are all equal before the update.

Why: a GRPO group whose episodes all succeed or all fail has advantage 0 for every member, so it teaches nothing
and, in the token-mean loss, only dilutes the groups that do teach. Measured on main before this module: SmolLM2
after SFT had groups with identical returns at nearly every online step (issue 24), so online RL changed nothing.

The curriculum keeps a success estimate per task family (the built-in template; a file task without one is its
own family): a Beta(1, 1) prior, the lake's own train-split rows of this model (views/family_success.sql, worth at
most `curriculum_prior` episodes), then this run's rollouts; a family's older evidence is multiplied by
`curriculum_decay` each step that brings new evidence of it (decaying every family every step made the ones not
drawn lately look unknown again). Simulated on bash_exec_env's 33 train families with a post-SFT-like profile (a
third never solved, a third always, the rest at 0.1-0.7; groups of 4, 4 tasks a step, 150 steps, 3 profiles x 3
seeds): 0.20-0.26 of the groups had a signal in the seeded order, 0.39-0.48 with the curriculum.
A family's weight is the chance that a group of G episodes has a signal, 1 - p^G - (1 - p)^G (largest at p = 1/2,
0 at p = 0 or 1), floored at `curriculum_floor` so solved and hopeless families are still revisited. Each task of
a step is drawn from those weights with an RNG seeded by (seed, data position), so the same state replays the
same tasks; the state is saved with each checkpoint (a resumed run picks on as the stopped one would have).
With actor processes (`--actors N`) the learner observes the rollouts it consumes from the lake and the actors pick
their batch's tasks from the curriculum state in the checkpoint they play (the lake and the run folder stay the only
channels), so the state is at most the few updates stale that the rollouts are.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

import envs
from trainers.runtime.errors import TrainerInputError


def family_of(task: envs.Task) -> str:
    return task.template or task.task_id


def signal_probability(p: float, group_size: int) -> float:
    """The chance that `group_size` independent episodes with success rate p do not all end the same way."""
    return 1.0 - p ** group_size - (1.0 - p) ** group_size


@dataclass(frozen=True)
class GroupSignal:
    """What dynamic sampling kept of one step's rollouts."""

    kept: list  # the rollouts of groups with a signal (or all of them when dropping is off)
    groups: int
    with_signal: int

    @property
    def fraction(self) -> float:
        return self.with_signal / self.groups if self.groups else 0.0

    @property
    def dropped(self) -> int:
        return self.groups - self.with_signal


def signal_groups(rollouts: list, drop: bool = True, eps: float = 1e-8) -> GroupSignal:
    """Group the rollouts by `.group`; a group has a signal when its returns differ (max - min > eps). With `drop`,
    only the rollouts of such groups are kept for the update (DAPO's dynamic sampling)."""
    return signal_by_key(rollouts, [r.group for r in rollouts], [r.recorder.reward for r in rollouts], drop, eps)


def signal_by_key(items: list, groups: list, returns: list[float], drop: bool = True,
                  eps: float = 1e-8) -> GroupSignal:
    """signal_groups for any items given each one's group key and return (the learner's lake rows)."""
    by_group: dict = defaultdict(list)
    for g, r in zip(groups, returns):
        by_group[g].append(r)
    live = {g for g, rs in by_group.items() if max(rs) - min(rs) > eps}
    kept = [x for x, g in zip(items, groups) if g in live] if drop else list(items)
    return GroupSignal(kept, len(by_group), len(live))


def curriculum_stream(cfg, group_size: int, tasks: list[envs.Task], seed: int, lake, model: str) -> CurriculumStream:
    """The curriculum of an online run (cfg: an OnlineConfig with curriculum on), started from the lake's rows of
    this model on the run's environment."""
    prior = lake_family_counts(lake, cfg.env, model) if cfg.curriculum_prior > 0 else {}
    return CurriculumStream(tasks, seed, group_size, floor=cfg.curriculum_floor, decay=cfg.curriculum_decay,
                            prior=prior, prior_weight=cfg.curriculum_prior)


def lake_family_counts(lake, env: str, model: str | None = None) -> dict[str, tuple[int, int]]:
    """{family: (episodes, successes)} of `env` from the lake's family_success view (one model's rows if given)."""
    snap = lake.snapshot(for_query="SELECT * FROM family_success")
    try:
        if model is not None:
            snap.con.execute("SET VARIABLE family_success_model = ?", [model])
        rows = snap.arrow("SELECT family, episodes, successes FROM family_success WHERE env = ?", [env]).to_pylist()
    finally:
        snap.close()
    return {r["family"]: (int(r["episodes"]), int(r["successes"])) for r in rows}


class CurriculumStream:
    """TaskStream's interface (`at(position)`) over the train tasks, drawn by family weight; `observe` feeds it a
    step's rollouts, `state`/`load_state` carry it through checkpoints."""

    def __init__(self, tasks: list[envs.Task], seed: int, group_size: int, *, floor: float = 0.05,
                 decay: float = 0.9, prior: dict[str, tuple[int, int]] | None = None, prior_weight: float = 8.0):
        if not tasks:
            raise TrainerInputError("the curriculum has no train tasks to pick from")
        self.tasks, self.seed, self.group_size = tasks, seed, group_size
        self.floor, self.decay = floor, decay
        self.by_family: dict[str, list[int]] = defaultdict(list)
        self.family_of_id: dict[str, str] = {}  # task_id -> family, for outcomes read back from the lake
        for i, t in enumerate(tasks):
            self.by_family[family_of(t)].append(i)
            self.family_of_id[t.task_id] = family_of(t)
        self.families = sorted(self.by_family)
        # pseudo-counts (episodes, successes) per family on top of Beta(1, 1)
        self.counts: dict[str, list[float]] = {f: [0.0, 0.0] for f in self.families}
        for fam, (n, s) in (prior or {}).items():
            if fam in self.counts and n > 0:
                scale = min(1.0, prior_weight / n)
                self.counts[fam] = [n * scale, s * scale]

    def rate(self, family: str) -> float:
        n, s = self.counts[family]
        return (s + 1.0) / (n + 2.0)

    def weights(self) -> dict[str, float]:
        return {f: max(self.floor, signal_probability(self.rate(f), self.group_size)) for f in self.families}

    def at(self, position: int) -> envs.Task:
        rng = random.Random(f"curriculum:{self.seed}:{position}")
        w = self.weights()
        family = rng.choices(self.families, weights=[w[f] for f in self.families])[0]
        return self.tasks[rng.choice(self.by_family[family])]

    def observe(self, rollouts: list) -> None:
        """One step's rollouts: each episode counts for its task's family (the template its environment reported at
        reset, else its task id, as family_of); the older evidence of a family played this step decays first (the
        policy has changed since), that of families not played stays as it was."""
        self.observe_outcomes((r.recorder.info["template"] or r.recorder.info["task_id"], bool(r.recorder.success))
                              for r in rollouts)

    def observe_outcomes(self, outcomes) -> None:
        """observe() for (family, success) pairs: the learner of actor processes reads them from its lake rows."""
        seen: dict[str, list[float]] = {}
        for fam, success in outcomes:
            if fam in self.counts:
                new = seen.setdefault(fam, [0.0, 0.0])
                new[0] += 1.0
                new[1] += 1.0 if success else 0.0
        for fam, (n, s) in seen.items():  # a family's old evidence fades only when new evidence replaces it
            c = self.counts[fam]
            c[0], c[1] = c[0] * self.decay + n, c[1] * self.decay + s

    def state(self) -> dict:
        return {"counts": {f: list(c) for f, c in self.counts.items()}}

    def load_state(self, state: dict) -> None:
        for f, c in state.get("counts", {}).items():
            if f in self.counts:
                self.counts[f] = [float(c[0]), float(c[1])]

    def summary(self, top: int = 5) -> dict:
        """The families with the highest weight now, with their estimated success rate (for the step log)."""
        w = self.weights()
        best = sorted(self.families, key=lambda f: (-w[f], f))[:top]
        return {f: round(self.rate(f), 3) for f in best}
