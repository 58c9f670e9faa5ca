"""Online RL's actors as Ray actors: `rl_train_online --actors N --ray ADDRESS`.

The placement is the only new thing. Each of the N actors is a Ray actor spread over the cluster's nodes
(placement.ray_cluster.spread) that runs trainers/rl/actors.py's loop, `play_batches`: one batch per policy version,
the same tasks, seeds and rows as an actor process, appended to the lake by the actor itself with its policy version
(the lake is the channel: a local root the nodes share, or an s3:// lake). The learner (trainers/rl/learner.py) is
unchanged: it consumes the change feed exactly once. What differs is where the policy comes from: no run folder is
shared. After each checkpoint the learner puts the weights folder's files in Ray's object store and publishes
(version, reference, curriculum state) on a `PolicyBoard`, a small Ray actor of its own; each actor polls the board,
fetches a new version's files once into a temporary folder on its node and loads them there.

Faults: an actor whose process dies (kill -9, its node removed) is replaced by a new one with the same index, which
plays the newest version it has not written a batch of (the board keeps each index's last one); the learner cannot
have moved past that version (it waits for N batches), so the dead actor's unfinished batch is played again, never
written twice (a batch is one commit: a killed actor wrote nothing of it). Only a kill between a batch's commit and
its note on the board plays that batch once more: consumed like any other, with ids of its own. The run's summary
counts the restarts. A cluster that goes away ends the run: `ClusterGone`'s one line where Ray raises in Python,
else Ray's core worker ends the process itself (the raylet beside it died) and the last-word watcher
(placement.ray_cluster) prints the line; every checkpoint is written atomically in the run folder, so the last one
is intact for `--resume`.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from placement import ray_cluster
from trainers.rl.actors import ActorFailed, play_batches
from trainers.runtime import checkpoint


class PolicyBoard:
    """A Ray actor on the learner's side: the newest policy version, its weights' object reference and curriculum
    state, and the order to stop."""

    def __init__(self):
        self.newest_version: tuple | None = None
        self.halted = False
        self.last: dict[int, int] = {}  # actor index -> the newest version it wrote a batch of

    def played(self, index: int, version: int) -> None:
        self.last[index] = max(version, self.last.get(index, -1))

    def last_played(self, index: int) -> int:
        return self.last.get(index, -1)

    def publish(self, version: int, refs: list, curriculum: dict) -> None:
        self.newest_version = (version, refs, curriculum)

    def newest(self) -> tuple | None:
        return self.newest_version

    def halt(self) -> None:
        self.halted = True

    def stopped(self) -> bool:
        return self.halted


class BoardPolicies:
    """`play_batches`' policy source in a Ray actor (trainers/rl/actors.py's RunFolderPolicies is the run folder's):
    the board's newest version, its weights written once into a folder of this node."""

    def __init__(self, board, index: int):
        self.board, self.index = board, index
        self.folder = Path(tempfile.mkdtemp(prefix="lachesis-policy-"))

    def last_played(self) -> int:
        """What a dead actor of this index wrote already: its replacement starts after it."""
        return ray_cluster.require_ray().get(self.board.last_played.remote(self.index))

    def played(self, version: int) -> None:
        # after the append: a kill between the two replays one batch (consumed as any other), never loses one,
        # which would leave the learner waiting for it
        ray_cluster.require_ray().get(self.board.played.remote(self.index, version))

    def stopped(self) -> bool:
        ray = ray_cluster.require_ray()
        try:
            return ray.get(self.board.stopped.remote())
        except ray.exceptions.RayActorError:  # the board went with its learner: stop as a local actor would
            return True

    def newest(self) -> tuple[int, tuple] | None:
        got = ray_cluster.require_ray().get(self.board.newest.remote())
        return None if got is None else (got[0], got)

    def fetch(self, version: int, got: tuple) -> tuple[str, dict]:
        _, refs, curriculum = got
        files = ray_cluster.require_ray().get(refs[0])
        target = self.folder / f"v{version}"
        for old in self.folder.iterdir():  # one version on disk at a time
            shutil.rmtree(old, ignore_errors=True)
        for rel, data in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return str(target), curriculum

    def gone(self, version: int, got: tuple) -> bool:
        return False  # a published version's files stay in the object store while the board names it


class RayActor:
    """A Ray actor running online RL's actor loop."""

    def run(self, cfg, index: int, count: int, board) -> int:
        return play_batches(cfg, index, count, BoardPolicies(board, index))

    def node(self) -> str:
        return ray_cluster.require_ray().get_runtime_context().get_node_id()

    def close(self) -> None:
        """Nothing to close: the loop appended each batch as it ended."""


def weights_files(ckpt: Path) -> dict[str, bytes]:
    """The files of a checkpoint's weights folder, by path inside it: what goes into the object store."""
    root = checkpoint.weights(ckpt)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class RayActorPool:
    """The learner's N Ray actors, with trainers/rl/actors.py ActorPool's interface (start, check, stop, kill) and
    `publish`, which puts each new policy version on the board."""

    def __init__(self, cfg, lake_root: str, run_path: Path):
        # an absolute lake root: a Ray actor's working folder is Ray's, not the learner's
        self.cfg, self.count = replace(cfg, lake_root=lake_root), cfg.actors
        kept = (f"the checkpoints in {run_path} are whole: `rl_train_online --resume {run_path} --ray ADDRESS` "
                "continues on another cluster")
        self.ours = ray_cluster.connect(cfg.ray, num_cpus=ray_cluster.worker_count(cfg.actors), after=kept)
        ray = ray_cluster.require_ray()
        self.board = ray.remote(num_cpus=0)(PolicyBoard).remote()
        self.actors: list = [None] * self.count
        self.nodes: list[str | None] = [None] * self.count  # the node each actor runs on (the report's)
        self.runs: list = [None] * self.count
        self.restarts, self.stopped, self.ended = 0, False, False

    def publish(self, version: int, ckpt: Path) -> None:
        if self.stopped:  # the last checkpoint, written after the actors were stopped: no one is left to play it
            return
        ray = ray_cluster.require_ray()
        state = checkpoint.read_state(ckpt) if self.cfg.curriculum else {}
        ref = ray.put(weights_files(ckpt))
        self._call(lambda: ray.get(self.board.publish.remote(version, [ref], state.get("curriculum") or {})))

    def start(self) -> None:
        for k in range(self.count):
            self._start(k)

    def _start(self, k: int) -> None:
        ray = ray_cluster.require_ray()
        (actor,) = ray_cluster.spread(RayActor, 1)
        # asked before `run` starts: an actor takes one call at a time, and `run` lasts until the end
        self.nodes[k] = self._call(lambda: ray.get(actor.node.remote()))
        self.actors[k], self.runs[k] = actor, actor.run.remote(self.cfg, k, self.count, self.board)

    def check(self) -> None:
        """An actor that died is replaced (its unfinished batch is played again); one that failed in our code, or
        ended before it was told to stop, is an error naming why."""
        ray = ray_cluster.require_ray()
        from ray import exceptions as rx

        ready, _ = self._call(lambda: ray.wait(self.runs, num_returns=len(self.runs), timeout=0))
        for ref in ready:
            k = self.runs.index(ref)
            try:
                ray.get(ref)
            except rx.RayActorError:
                if self.stopped:
                    continue
                self.restarts += 1
                self._start(k)
                continue
            except rx.RayTaskError as exc:
                why = ray_cluster.first_line(exc.as_instanceof_cause())
                raise ActorFailed(f"Ray actor {k} failed: {why}") from None
            if not self.stopped:
                raise ActorFailed(f"Ray actor {k} ended before it was told to stop")

    def stop(self, timeout: float = 600.0) -> None:
        """Halt on the board, then wait for every actor to write the batch it is playing and end."""
        self.stopped = True
        ray = ray_cluster.require_ray()
        self._call(lambda: ray.get(self.board.halt.remote()))
        self._call(lambda: ray.wait(self.runs, num_returns=len(self.runs), timeout=timeout))
        self.check()
        self._end()

    def kill(self) -> None:
        """After a learner error, or at the end: no actor outlives the learner."""
        self.stopped = True
        self._end()

    def report(self) -> dict:
        return {"ray": self.cfg.ray, "actor_nodes": list(self.nodes), "actor_restarts": self.restarts}

    def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        from ray import exceptions as rx

        try:
            ray_cluster.end([a for a in self.actors if a is not None] + [self.board], close=None)
        except (rx.RayError, ConnectionError, ray_cluster.ClusterGone):  # a cluster already gone has nothing to end
            pass
        if self.ours:
            ray_cluster.disconnect()

    def _call(self, fn):
        """Ray's connection errors as the one-line ClusterGone."""
        ray_cluster.require_ray()
        from ray import exceptions as rx

        try:
            return fn()
        except (rx.RaySystemError, rx.RpcError, ConnectionError) as exc:
            raise ray_cluster.ClusterGone(f"the Ray cluster went away: {ray_cluster.first_line(exc)}") from None
