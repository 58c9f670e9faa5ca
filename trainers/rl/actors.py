"""Actor processes of online RL: each plays rollouts with the latest policy checkpoint and appends them to the lake.

`rl_train_online --actors N` (N > 1) starts N of these beside the learner (trainers/rl/learner.py). The lake is the
only data channel: an actor reads the policy from the run folder's newest checkpoint (complete by construction:
trainers/runtime/checkpoint.py renames a finished folder into place) and writes its rollouts to `trajectories`, one
commit per batch, with their policy_version (the checkpoint's step), per-step rewards and the sampled tokens
(`tokens`, `masks`); the learner reads them back from the change feed. So the rollouts are also SFT, replay and
DPO data later, and more actors need no new machinery.

Each actor plays at most one batch (`batch_size` tasks x `group_size` rollouts, the same batch the in-process loop
plays per step) per policy version, so a rollout is at most a few updates stale; actor k's batch of version v
takes the tasks at position (v x N + k) x batch_size of the run's seeded task stream (distinct across actors and
versions) and seeds its episodes from (v, k); with --curriculum the task at that position is drawn from the
curriculum state saved in checkpoint v (trainers/rl/curriculum.py). An actor stops when the run folder holds `actors/STOP` (the learner
writes it before its last step and waits for the batches in flight) or when its learner is gone (the parent
process changed: a killed learner leaves no actors behind).

    python -m trainers.rl.actors RUN_DIR INDEX COUNT LEARNER_PID      (started by the learner, not by hand)
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ground import processes
from trainers.eval.evaluate import load_eval_tasks
from trainers.generation.generate import rollout_model, use_bf16
from trainers.modeling.models import model_label
from trainers.modeling.policy import PolicySpec, build_policy, tokenizer_for
from trainers.rl.curriculum import CurriculumStream
from trainers.rl.groups import TaskStream, play_groups, rollout_rows
from trainers.rl.online import read_run_config
from trainers.rl.project_config import ProjectConfig
from trainers.runtime import checkpoint
from trainers.runtime.device import device as pick_device
from trainers.runtime.device import set_threads, setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.runfolder import trainer_lake

SOURCE = "rl_actor"
DIR = "actors"
STOP = "STOP"
POLL_S = 0.05
REPO = Path(__file__).resolve().parents[2]  # the checkout: not a folder named lake in the working directory


class ActorFailed(TrainerInputError):
    """An actor process ended with an error: its log says why (exit code 1, one line)."""

    exit_code = 1


def seed_key(version: int, index: int, count: int) -> int:
    """The episode seeds of actor `index`'s batch at policy `version` (trainers/rl/groups.py's play_groups)."""
    return 1 + version * count + index


# ----------------------------------------------------------------------------------------------- the actor
class RunFolderPolicies:
    """Where an actor process finds the policy: the run folder's newest checkpoint (complete by construction), its
    weights folder and curriculum state; told to stop by actors/STOP or by its learner's end (the parent changed).
    trainers/rl/ray_actors.py's `BoardPolicies` is the same for Ray actors, through Ray's object store."""

    def __init__(self, run_dir: Path, learner_pid: int):
        self.run_dir, self.learner_pid = run_dir, learner_pid

    def stopped(self) -> bool:
        return (self.run_dir / DIR / STOP).exists() or os.getppid() != self.learner_pid

    def newest(self) -> tuple[int, Path] | None:
        """(version, checkpoint) of the newest policy, None before the first."""
        ckpt = checkpoint.latest(self.run_dir)
        return (checkpoint.step_of(ckpt), ckpt) if ckpt else None

    def fetch(self, version: int, ckpt: Path) -> tuple[str, dict]:
        """(weights folder, curriculum state) of that version."""
        return str(checkpoint.weights(ckpt)), checkpoint.read_state(ckpt).get("curriculum") or {}

    def gone(self, version: int, ckpt: Path) -> bool:
        """Whether the learner removed that checkpoint meanwhile (it keeps a few): then take the newest."""
        return not ckpt.exists()

    def last_played(self) -> int:
        """The newest version this actor's index wrote a batch of before it started (-1: none; an actor process is
        never restarted: a killed learner's run starts new ones from its --resume)."""
        return -1

    def played(self, version: int) -> None:
        """The batch of `version` is in the lake."""


def run_actor(run_dir: Path, index: int, count: int, learner_pid: int) -> int:
    """Play batches until STOP or the learner is gone; returns the number of batches written."""
    return play_batches(read_run_config(run_dir), index, count, RunFolderPolicies(run_dir, learner_pid))


def play_batches(cfg, index: int, count: int, policies) -> int:
    """The actor's loop, wherever it runs: one batch per policy version `policies` publishes, appended to the lake,
    until `policies.stopped()`; returns the number of batches written."""
    import torch

    setup_env()
    hp, spec = ProjectConfig(**cfg.project), PolicySpec(**cfg.policy)
    set_threads(cfg.threads)
    dev = pick_device(cfg.device)
    tok = tokenizer_for(spec)
    writer = trainer_lake(cfg.lake_root).writer(f"{SOURCE}:{cfg.run_id}:{index}:{uuid.uuid4().hex[:8]}")
    tasks = load_eval_tasks(cfg.env, "train", cfg.tasks_file)
    stream = (CurriculumStream(tasks, hp.seed, hp.group_size, floor=cfg.curriculum_floor, decay=cfg.curriculum_decay)
              if cfg.curriculum else TaskStream(tasks, hp.seed))
    label = model_label(cfg.model)
    played, written = policies.last_played(), 0  # an actor replacing a dead one does not play its versions again
    while not policies.stopped():
        newest = policies.newest()
        version = newest[0] if newest else -1
        if version <= played:  # one batch per policy version: wait for the learner's next update
            time.sleep(POLL_S)
            continue
        try:
            weights, curriculum = policies.fetch(*newest)
            model, _ = build_policy(spec, weights, dev)
            if cfg.curriculum:  # the learner's curriculum as of this version: it picks this batch's tasks
                stream.load_state(curriculum)
        except (OSError, TrainerInputError):
            if not policies.gone(*newest):
                raise
            continue  # the learner removed that version meanwhile: take the newest
        key = seed_key(version, index, count)
        torch.manual_seed(hp.seed * 1_000_003 + key)
        position = (version * count + index) * hp.batch_size
        res = play_groups(rollout_model(model, use_bf16(cfg.bf16, dev)), tok, cfg, hp, stream, position, key)
        rows = rollout_rows(res, label, hp, SOURCE, str(version), f"{cfg.run_id}/actor{index}-v{version}", position,
                            {"train_run_id": cfg.run_id, "actor": index})
        writer.append("trajectories", rows)
        policies.played(version)
        played, written = version, written + 1
    return written


def main(argv: list[str] | None = None) -> None:
    run_dir, index, count, learner_pid = (argv or sys.argv[1:])[:4]
    run_actor(Path(run_dir), int(index), int(count), int(learner_pid))


# ----------------------------------------------------------------------------------------------- the learner's side
class ActorPool:
    """The learner's N actor subprocesses: started once the policy's first checkpoint exists, checked while the
    learner waits for rollouts, stopped (STOP, then wait for the batches in flight) before the last step."""

    def __init__(self, run_dir: Path, count: int, threads: int | None):
        self.run_dir, self.count, self.threads = Path(run_dir).resolve(), count, threads
        self.folder = self.run_dir / DIR
        self.procs: list[subprocess.Popen] = []
        self.stopped = False

    def start(self) -> None:
        self.folder.mkdir(exist_ok=True)
        (self.folder / STOP).unlink(missing_ok=True)  # a resumed run: its stopped actors start again
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": str(self.threads or os.environ.get("LACHESIS_THREADS", "1"))}
        for k in range(self.count):
            with (self.folder / f"actor-{k}.log").open("a") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "trainers.rl.actors", str(self.run_dir), str(k), str(self.count),
                     str(os.getpid())], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    def check(self) -> None:
        """An actor that ended before it was told to stop is an error naming its log."""
        for k, p in enumerate(self.procs):
            rc = p.poll()
            if rc is not None and not self.stopped:
                log = self.folder / f"actor-{k}.log"
                tail = log.read_text().strip().splitlines()[-1:] if log.is_file() else []
                raise ActorFailed(f"actor {k} exited with {rc}: {tail[0] if tail else 'no output'} (see {log})")

    def stop(self, timeout: float = 600.0) -> None:
        """STOP, then wait for every actor to write the batch it is playing and exit."""
        self.stopped = True
        if self.procs:
            (self.folder / STOP).touch()
        processes.stop(self.procs, timeout, term=False)  # told by the STOP file; killed past the timeout
        self.check_exits()

    def check_exits(self) -> None:
        failed = [(k, p.returncode) for k, p in enumerate(self.procs) if p.returncode not in (0, None)]
        if failed:
            k, rc = failed[0]
            raise ActorFailed(f"actor {k} exited with {rc} (see {self.folder / f'actor-{k}.log'})")

    def kill(self) -> None:
        """After a learner error: no actor outlives it."""
        self.stopped = True
        processes.stop(self.procs, 0, term=False)

    def publish(self, version: int, ckpt: Path) -> None:
        """A new policy version: the actor processes read it from the run folder themselves."""

    def report(self) -> dict:
        """What the run's summary says of its actors (Ray actors also count restarts and lost batches)."""
        return {}


if __name__ == "__main__":
    main()
