"""`lake rollout --ray`: the rollout's episodes played by Ray workers across a cluster's nodes, written by the command's
own process.

Each worker is a Ray actor (placement.ray_cluster.spread: over as many nodes as the cluster has) holding one
`EpisodePlayer`, the environment and scripted policy every rollout thread plays with (for a web environment, a
browser of its own on its node). It is handed chunks of episode indices, one chunk at a time
(placement.ray_cluster.dispatch), and returns their records; `iter_ray_rollouts` yields them as `iter_rollouts` does,
and ingest/rollout.py's `run_rollout` appends them with the same commits, ids and `--resume`.

Why the workers return rows instead of appending them: the lake's writer rules stay those of one process (one
writer id with its batch sequence, commit locks that serialise the processes of one machine), a node needs no access
to the lake (a local lake needs no shared folder, an s3:// lake no credentials on every node), and an episode is
written only once it is back here. A worker killed mid-chunk wrote nothing: another worker plays the chunk again
(the same indices, so the same ids and records); when no worker is left, the episodes not played are `EpisodeLost`,
reported as lost like an environment's fault, never written twice.
"""
from __future__ import annotations

import math
from typing import Iterator

import envs
from envs.core.episode import EpisodeLost
from ingest.rollout import EpisodePlayer, browser_pool, check_tasks
from ingest.rollout_config import RolloutSpec
from placement import ray_cluster

CHUNKS_PER_WORKER = 4  # a chunk per call keeps Ray's per-call cost off each episode; four per worker balances nodes
MAX_CHUNK = 8


class RolloutWorker:
    """A Ray actor: one EpisodePlayer for the rollout group; `play(indices)` returns [(index, record or the lost
    reason)]."""

    def __init__(self, spec: RolloutSpec, group_id: str, tasks: list | None):
        # a web environment's browser in a pool of this worker's own, shut down by `close` (an actor's process is
        # killed at the end, and a browser of the process-wide pool would outlive it)
        self.pool = browser_pool(envs.resolve_name(spec.env), 1, own=True)
        self.player = EpisodePlayer(spec, group_id, tasks, self.pool)

    def play(self, indices: list[int]) -> list[tuple[int, dict | str]]:
        out: list[tuple[int, dict | str]] = []
        for i in indices:
            rec = self.player.play(i)
            out.append((i, str(rec) if isinstance(rec, EpisodeLost) else rec))
        return out

    def close(self) -> None:
        self.player.close()
        if self.pool is not None:
            self.pool.shutdown()


def chunks(indices: list[int], workers: int) -> list[list[int]]:
    """The indices in order, cut in chunks of at most MAX_CHUNK, about CHUNKS_PER_WORKER per worker."""
    size = max(1, min(MAX_CHUNK, math.ceil(len(indices) / (workers * CHUNKS_PER_WORKER))))
    return [indices[k:k + size] for k in range(0, len(indices), size)]


def iter_ray_rollouts(spec: RolloutSpec, *, group_id: str,
                      skip: frozenset[int] = frozenset()) -> Iterator[tuple[int, dict | EpisodeLost]]:
    """(index, record or EpisodeLost) for each episode not in `skip`, played on the Ray cluster `spec.ray` by
    `spec.workers` workers, as the chunks come back (see the module)."""
    tasks = envs.load_tasks_file(spec.tasks_file) if spec.tasks_file else None  # once, sent to every worker
    check_tasks(spec, tasks)
    todo = [i for i in range(spec.episodes) if i not in skip]
    if not todo:
        return
    workers = min(spec.workers, len(todo))
    kept = ("the episodes committed so far stay in the lake: the same `lake rollout` with --resume plays only the "
            "missing ones")
    with ray_cluster.connected(spec.ray, num_cpus=ray_cluster.worker_count(workers), after=kept):
        actors = ray_cluster.spread(RolloutWorker, workers, spec, group_id, tasks)
        try:
            for chunk, result in ray_cluster.dispatch(actors, "play", chunks(todo, workers)):
                if isinstance(result, ray_cluster.Lost):
                    for i in chunk:
                        yield i, EpisodeLost(result.reason)
                    continue
                for i, rec in result:
                    yield i, EpisodeLost(rec) if isinstance(rec, str) else rec
        finally:
            ray_cluster.end(actors)  # each worker closes its environment (and browser), then its process ends
