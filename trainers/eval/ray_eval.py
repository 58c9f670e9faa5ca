"""`hermes_eval --ray ADDRESS --workers N`: the evaluation's tasks played by N Ray workers, recorded and summed up by
the command's own process.

Each worker (a Ray actor, placed over the cluster's nodes by placement.ray_cluster.spread) loads the model and
adapter as hermes_eval does (`load_eval_model`; the model spec is resolved on the worker's node: a hub id, the tiny
recipe or a path every node can read) and plays shards of consecutive tasks with `evaluate_model`, the one
evaluation loop. Task i of the evaluation keeps its seed (`seed + i`: a shard starting at task k is played with
seed + k), and greedy decoding does not depend on which episodes share a batch, so the results are those of one
process; `eval_summary` sums them up in task order. The workers return each episode's record and this process
appends them (run_eval's EpisodeWriter): the lake's writer stays one process, the nodes need no access to the lake,
and an episode is written once, when its shard comes back. A worker killed mid-shard wrote nothing: another plays
the shard again; when none is left the shard's tasks are counted in `lost`.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

import envs
from placement import ray_cluster
from trainers.eval.config import EvalSettings
from trainers.eval.evaluate import episode_record, eval_summary, evaluate_model, load_eval_model
from trainers.runtime.progress import Progress


class EvalWorker:
    """A Ray actor: the model loaded once; `play((start, tasks))` evaluates a shard of consecutive tasks."""

    def __init__(self, s: EvalSettings, run_id: str, label: str, adapter: str | None):
        from trainers.modeling.models import resolve_model
        from trainers.runtime.device import device as pick_device
        from trainers.runtime.device import setup_env

        setup_env()
        self.s, self.run_id, self.label, self.adapter = replace(s, progress=False), run_id, label, adapter
        self.model, self.tok = load_eval_model(self.s, resolve_model(s.model), adapter, pick_device(s.device))

    def play(self, shard: tuple[int, list[envs.Task]]) -> dict:
        """The shard's results, lost tasks, faults, generation time and trajectory records."""
        start, tasks = shard
        s = replace(self.s, seed=self.s.seed + start)  # task start + j plays with seed + start + j, as in one process
        summary, finished = evaluate_model(self.model, self.tok, s, tasks, None, run_id=self.run_id, label=self.label,
                                           adapter=self.adapter)
        return {"per_task": summary["per_task"], "lost": summary["lost"], "faults": summary["faults"],
                "generate_s": summary["generate_s"],
                "records": [episode_record(e, run_id=self.run_id, model=self.label, adapter=self.adapter)
                            for e in finished]}

    def close(self) -> None:
        """Nothing held beyond the process: each episode's environment was closed as it ended."""


def shards(tasks: list[envs.Task], workers: int, batch_size: int) -> list[tuple[int, list[envs.Task]]]:
    """(first task's index, consecutive tasks): an equal share per worker, cut at --batch-size (one shard fills at
    most one batch of episodes)."""
    size = max(1, min(batch_size, math.ceil(len(tasks) / workers)))
    return [(k, tasks[k:k + size]) for k in range(0, len(tasks), size)]


def evaluate_on_ray(s: EvalSettings, tasks: list[envs.Task], console=None, *, run_id: str, label: str,
                    adapter: str | None, on_record: Callable[[dict], None] | None = None) -> dict:
    """The summary of `tasks` evaluated by `s.workers` Ray workers on cluster `s.ray`, `on_record(record)` for each
    episode as its shard comes back (see the module)."""
    t0 = time.perf_counter()
    parts: dict[int, dict] = {}
    lost: list[dict] = []
    work = shards(tasks, s.workers, s.batch_size)
    workers = min(s.workers, len(work))
    kept = "the episodes recorded so far stay in the lake" if s.record_in_lake else ""
    with ray_cluster.connected(s.ray, num_cpus=ray_cluster.worker_count(workers), after=kept):
        actors = ray_cluster.spread(EvalWorker, workers, s, run_id, label, adapter)
        try:
            with Progress(console if s.progress else None, "eval", len(tasks), unit="episodes",
                          style="bold green") as prog:
                for (start, shard), part in ray_cluster.dispatch(actors, "play", work):
                    if isinstance(part, ray_cluster.Lost):
                        lost += [{"task_id": t.task_id, "reason": part.reason} for t in shard]
                    else:
                        parts[start] = part
                        for rec in part["records"]:
                            if on_record is not None:
                                on_record(rec)
                    prog.advance(len(shard))
        finally:
            ray_cluster.end(actors)
    ordered = [parts[k] for k in sorted(parts)]
    order = {t.task_id: i for i, t in enumerate(tasks)}
    lost = sorted([x for p in ordered for x in p["lost"]] + lost, key=lambda x: order.get(x["task_id"], 0))
    return eval_summary(s, [r for p in ordered for r in p["per_task"]], lost, sum(p["faults"] for p in ordered),
                        run_id=run_id, label=label, adapter=adapter, wall_s=time.perf_counter() - t0,
                        generate_s=sum(p["generate_s"] for p in ordered))
