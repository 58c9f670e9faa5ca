"""Online RL that gets signal (issue 24 item 3): the curriculum prefers families the policy solves sometimes
(seeded, deterministic, resumable), zero-variance groups are dropped and counted, the lake's family_success view
feeds it, and a short tiny-model online run logs the fraction of groups with a signal."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import pytest

import envs
from tests.test_train_online import lake_root, write_project, write_tasks  # noqa: F401  (fixture)
from train_helpers import tiny_dir  # noqa: F401  (session fixture)
from trainers.rl.config import OnlineConfig
from trainers.rl.curriculum import CurriculumStream, lake_family_counts, signal_groups, signal_probability
from trainers.rl.groups import TaskStream
from trainers.runtime.errors import TrainerInputError

FAMS = ("count", "tail", "sed")  # bash_exec_env templates


def _tasks(per_family: int = 4) -> list[envs.Task]:
    suite = envs.builtin_suite("bash_exec_env").only_templates(list(FAMS))
    return [suite.task("train", i) for i in range(per_family * len(FAMS))]


@dataclass
class Played:
    """What dynamic sampling and the curriculum read of a Rollout: its group and its (real) episode recorder."""

    recorder: envs.EpisodeRecorder
    group: int


@pytest.fixture(scope="module")
def played():
    """Real episodes: the expert succeeds on a `count` task, the random policy fails it."""
    env = envs.make("bash_exec_env", split="train", max_steps=2)
    task = _tasks()[0]
    try:
        return {kind: envs.play(env, envs.get_policy("bash_exec_env", kind, seed=1), options={"task_id": task.task_id})
                for kind in ("expert", "random")}
    finally:
        env.close()


def test_signal_probability_peaks_at_half():
    assert signal_probability(0.5, 4) == pytest.approx(1 - 2 / 16)
    assert signal_probability(0.0, 4) == signal_probability(1.0, 4) == 0.0
    assert signal_probability(0.5, 8) > signal_probability(0.5, 2) > signal_probability(0.9, 2)


def test_curriculum_prefers_families_solved_sometimes_and_is_deterministic():
    prior = {"count": (40, 0), "tail": (40, 40), "sed": (40, 20)}  # never, always, half the time
    def make():
        return CurriculumStream(_tasks(), seed=7, group_size=4, floor=0.05, prior=prior, prior_weight=40)

    stream = make()
    picks = Counter(stream.at(p).template for p in range(600))
    assert picks["sed"] > 0.75 * 600 and 0 < picks["count"] < 0.15 * 600 and 0 < picks["tail"] < 0.15 * 600
    a, b = make(), make()
    assert [a.at(p).task_id for p in range(50)] == [b.at(p).task_id for p in range(50)]
    assert [a.at(p).task_id for p in range(50)] != [a.at(p + 1).task_id for p in range(50)]
    other = CurriculumStream(_tasks(), seed=8, group_size=4, prior=prior, prior_weight=40)
    assert [other.at(p).task_id for p in range(50)] != [a.at(p).task_id for p in range(50)]


def test_curriculum_learns_from_the_runs_rollouts_and_restores_its_state(played):
    stream = CurriculumStream(_tasks(), seed=1, group_size=4, decay=0.9)
    assert len(set(stream.weights().values())) == 1  # no evidence: every family alike
    for _ in range(10):  # `count` always solved: its weight falls (decay bounds the evidence at 40 episodes)
        stream.observe([Played(played["expert"], 0)] * 4)
    w = stream.weights()
    assert w["count"] < 0.2 and w["tail"] == w["sed"] == pytest.approx(signal_probability(0.5, 4))
    again = CurriculumStream(_tasks(), seed=1, group_size=4, decay=0.9)
    again.load_state(json.loads(json.dumps(stream.state())))  # through a checkpoint's state.json
    assert again.weights() == w and [again.at(p).task_id for p in range(30)] == [stream.at(p).task_id for p in range(30)]


@dataclass
class Outcome:
    """A simulated episode's end as the curriculum reads it (EpisodeRecorder's info and success)."""

    info: dict
    success: bool


def test_curriculum_doubles_the_groups_with_a_signal_on_a_simulated_policy():
    import random

    tasks = envs.load_tasks("bash_exec_env", "train")[:200]
    fams = sorted({t.template for t in tasks})
    rng = random.Random(0)  # a third never solved, a third always, the rest sometimes (as after SFT)
    p = {f: (0.0, 1.0, rng.choice((0.1, 0.3, 0.5, 0.7)))[i % 3] for i, f in enumerate(fams)}

    def signal_fraction(stream) -> float:
        play, with_signal = random.Random(1), 0
        for step in range(60):
            rolls = []
            for b in range(4):
                task = stream.at(step * 4 + b)
                wins = [play.random() < p[task.template] for _ in range(4)]
                with_signal += len(set(wins)) > 1
                rolls += [Played(Outcome({"template": task.template, "task_id": task.task_id}, w), b) for w in wins]
            if isinstance(stream, CurriculumStream):
                stream.observe(rolls)
        return with_signal / 240

    seeded = signal_fraction(TaskStream(tasks, 0))
    assert signal_fraction(CurriculumStream(tasks, 0, group_size=4)) > 1.4 * seeded > 0


def test_zero_variance_groups_are_dropped_and_counted(played):
    win, lose = played["expert"], played["random"]
    assert win.reward == 1.0 and lose.reward < 1.0
    rollouts = ([Played(win, 0)] * 3 + [Played(lose, 0)]            # group 0: mixed -> kept
                + [Played(win, 1)] * 4 + [Played(lose, 2)] * 4)     # groups 1, 2: all equal -> dropped
    sig = signal_groups(rollouts)
    assert (sig.groups, sig.with_signal, sig.dropped) == (3, 1, 2) and sig.fraction == pytest.approx(1 / 3)
    assert sig.kept == rollouts[:4]
    kept_all = signal_groups(rollouts, drop=False)
    assert kept_all.kept == rollouts and kept_all.with_signal == 1
    assert signal_groups([]).fraction == 0.0


def test_family_success_view_reads_model_rows_only(tmp_path, played):
    from lake import Lake

    lake = Lake.init(tmp_path / "lake")
    rec = lambda r, model, i: r.record(model=model, policy_version="0", source="t", seed=i)  # noqa: E731
    lake.append("trajectories", [rec(played["expert"], "tiny", 0), rec(played["random"], "tiny", 1),
                                 rec(played["random"], "tiny", 2), rec(played["expert"], "policy:expert", 3),
                                 rec(played["expert"], "other", 4)])
    assert lake_family_counts(lake, "bash_exec_env", "tiny") == {"count": (3, 1)}
    assert lake_family_counts(lake, "bash_exec_env") == {"count": (4, 2)}  # scripted policies never count
    assert lake_family_counts(lake, "git_repo_env") == {}


def test_curriculum_options_are_checked():
    assert OnlineConfig(env="shell", curriculum=True, actors=2).curriculum  # actors draw from the checkpoint's state
    with pytest.raises(TrainerInputError, match="curriculum-floor"):
        OnlineConfig(env="shell", curriculum_floor=0.0)


def test_online_run_reports_the_signal_fraction(tiny_dir, tmp_path, lake_root):  # noqa: F811
    from trainers.rl.online import run_online

    cfg = OnlineConfig(env="shell", steps=2, eval_interval=2, config=str(write_project(tmp_path / "l.toml")),
                       tasks_file=str(write_tasks(tmp_path / "tasks.jsonl")), output=str(tmp_path / "run"),
                       lake_root=str(lake_root), progress=False, device="cpu", curriculum=True)
    summary = run_online(cfg)
    assert summary["steps"] == 2
    steps = [json.loads(x) for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "signal_groups" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["groups"] == 2 and r["dropped_groups"] == round(r["groups"] * (1 - r["signal_groups"]))
        assert r["trained_episodes"] <= 2 * (r["groups"] - r["dropped_groups"])
        assert set(r["curriculum_top"]) <= {f"keep-train-{i}" for i in range(3)}  # file tasks: their own family
    assert (tmp_path / "run" / "eval_curve.png").is_file()
    state = json.loads(next((tmp_path / "run").glob("checkpoints/*/state.json")).read_text())
    assert set(state["curriculum"]["counts"]) == {f"keep-train-{i}" for i in range(3)}
