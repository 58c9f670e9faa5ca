"""The rollout runner: episodes of (environment, scripted policy) as native trajectory records, into a lake as
they finish.

- `iter_rollouts(spec)` is pure (no lake): it plays the episodes, `spec.workers` at a time, and yields
  `(index, record)` as each finishes (completion order), or `(index, EpisodeLost)` for an episode whose every
  try failed in the environment (envs.core.episode.play_retrying: a page error or a dead browser replays the episode,
  never ends the run). Episode i plays task `(seed + i) % n` of the split with seed `seed + i`.
- `run_rollout(spec, lake_root)` writes them: a commit every `spec.commit_every` finished episodes or 10 s, and
  one when the run stops for any reason (an exception, Ctrl-C), so a run killed outright loses at most the
  episodes of its last seconds. Each episode's trajectory id is fixed by the run's group id and its index
  (`episode_id`), and `spec.resume` picks the newest group of the same options in the lake and plays only its
  episodes not yet there: a resumed run writes no episode twice (the lake's duplicate rule skips a repeated id
  as well).

- With `spec.ray`, the same episodes (the same index, task, seed and id) are played by Ray workers across a
  cluster's nodes (ingest/rollout_ray.py) and written here, through the same commits and `--resume`.

`lake rollout` (lachesis/rollout_cli.py) wires it to the command line, so a lake can be filled without a model.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import envs
from envs.core.episode import EpisodeLost
from ground.digest import file_sha256
from ingest.rollout_config import RolloutInputError, RolloutSpec
from lake import Lake
from lake.lake import process_writer_id
from lake.output_folder import check_output_folder
from lake.store import is_url

__all__ = ["RolloutInputError", "RolloutSpec", "iter_rollouts", "run_rollouts", "run_rollout", "summarize",
           "append_rollouts", "episode_id", "rollout_prefix"]

SOURCE = "lachesis.ingest.rollout"
COMMIT_SECONDS = 10.0
_EPISODES = uuid.UUID("6c0b9f6e-4b8e-4f43-9a55-1d8f0a3c7e21")  # the namespace of rollout episode ids


def rollout_prefix(spec: RolloutSpec) -> str:
    """`rollout-<env>-<policy>-<digest>`: the digest covers every option that decides what episode i is (not
    --episodes, --workers or where screenshots go), so a resumed run finds the groups of the same rollout."""
    name = envs.resolve_name(spec.env)
    decides = {k: v for k, v in asdict(spec).items()
               if k not in ("episodes", "workers", "commit_every", "resume", "screenshots", "ray")}
    decides["env"] = name
    if spec.tasks_file:
        decides["tasks_file"] = file_sha256(spec.tasks_file)
    digest = hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()[:10]
    return f"rollout-{name}-{spec.policy}-{digest}"


def episode_id(group_id: str, index: int) -> str:
    """The trajectory id of episode `index` of a rollout group: the same episode, the same id."""
    return str(uuid.uuid5(_EPISODES, f"{group_id}/{index}"))


def _make_env(spec: RolloutSpec, name: str, tasks: list | None, pool=None):
    """An environment of the rollout: `tasks`, the task file's tasks read once (None: the built-in suite)."""
    kw: dict = {"split": spec.split, "max_steps": spec.max_steps}
    if tasks is not None:
        kw["tasks"] = tasks
    if spec.templates:
        kw["templates"] = list(spec.templates)
    if spec.screenshots:
        kw["screenshots"] = spec.screenshots
    if pool is not None:
        kw["pool"] = pool
    return envs.make(name, **kw)


def browser_pool(name: str, workers: int, own: bool = False):
    """A pool of `workers` browsers for a web environment's workers (None: the environment's default pool, or with
    `own` a pool even for one worker: a Ray worker's, shut down with it)."""
    if (workers < 2 and not own) or "web" not in envs.env_info(name).tags:
        return None
    from envs.web.browser import BrowserPool

    return BrowserPool(max_browsers=workers)


class EpisodePlayer:
    """One worker's environment and scripted policy: `play(i)` is episode i of the rollout group, the same record
    (or EpisodeLost) whichever worker plays it. The threads of `iter_rollouts` and the Ray workers of
    ingest/rollout_ray.py both play through it."""

    def __init__(self, spec: RolloutSpec, group_id: str, tasks: list | None = None, pool=None):
        self.spec, self.group_id, self.name = spec, group_id, envs.resolve_name(spec.env)
        self.env = _make_env(spec, self.name, tasks, pool)
        self.tasks = self.env.unwrapped.suite.count(spec.split)
        self.policy = envs.get_policy(self.name, spec.policy, seed=spec.seed)

    def play(self, i: int) -> dict | EpisodeLost:
        """Episode i: task (seed + i) % n of the split, seeded seed + i, its trajectory id `episode_id(group, i)`."""
        seed = self.spec.seed + i
        try:
            return envs.policy_record(self.env, self.policy, seed=seed, options={"index": seed % self.tasks},
                                      source=SOURCE, group_id=self.group_id,
                                      trajectory_id=episode_id(self.group_id, i))
        except EpisodeLost as exc:
            return exc

    def close(self) -> None:
        self.env.close()


def check_tasks(spec: RolloutSpec, tasks: list | None) -> None:
    """A split with no task is refused before any worker starts."""
    name = envs.resolve_name(spec.env)
    probe = _make_env(spec, name, tasks)
    n = probe.unwrapped.suite.count(spec.split)
    probe.close()
    if n == 0:
        raise ValueError(f"{name} has no {spec.split} tasks")


def iter_rollouts(spec: RolloutSpec, *, group_id: str | None = None,
                  skip: frozenset[int] = frozenset()) -> Iterator[tuple[int, dict | EpisodeLost]]:
    """(index, record or EpisodeLost) for each episode not in `skip`, as the episodes finish (see the module)."""
    name = envs.resolve_name(spec.env)
    group_id = group_id or f"{rollout_prefix(spec)}-{uuid.uuid4().hex[:8]}"
    tasks = envs.load_tasks_file(spec.tasks_file) if spec.tasks_file else None  # once, not per worker
    check_tasks(spec, tasks)
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(spec.episodes):
        if i not in skip:
            todo.put(i)
    done: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    pool = browser_pool(name, spec.workers)

    def worker() -> None:
        player = None
        try:
            player = EpisodePlayer(spec, group_id, tasks, pool)
            while not stop.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                done.put((i, player.play(i)))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it as it was
            done.put((None, exc))
        finally:
            if player is not None:
                player.close()
            done.put((None, None))

    threads = [threading.Thread(target=worker, name=f"rollout-{k}", daemon=True)
               for k in range(min(spec.workers, max(1, spec.episodes - len(skip))))]
    for t in threads:
        t.start()
    running = len(threads)
    try:
        while running:
            i, item = done.get()
            if i is None:
                if item is None:
                    running -= 1
                    continue
                raise item
            yield i, item
    finally:
        stop.set()
        for t in threads:
            t.join()
        if pool is not None:
            pool.shutdown()


def run_rollouts(spec: RolloutSpec, on_episode: Callable[[dict], None] | None = None) -> list[dict]:
    """Every record of a rollout, in episode order (no lake; lost episodes are left out)."""
    out: dict[int, dict] = {}
    for i, rec in iter_rollouts(spec):
        if isinstance(rec, dict):
            out[i] = rec
            if on_episode:
                on_episode(rec)
    return [out[i] for i in sorted(out)]


def summarize(records: list[dict]) -> dict:
    n = len(records)
    return {"episodes": n, "mean_reward": sum(r["reward"] for r in records) / n if n else 0.0,
            "success_rate": sum(1 for r in records if r["success"]) / n if n else 0.0}


def append_rollouts(records: list[dict], lake_root=None):
    """Append the records to the lake's trajectories table as one commit. Like every ingest path, the
    rollout runner creates the lake when the root has none yet."""
    lake = Lake.init(lake_root)
    return lake.append("trajectories", records, writer_id=process_writer_id("rollout"))


@dataclass
class RolloutResult:
    """What `run_rollout` did: the group it wrote, how many episodes were in the lake before (resume), played,
    written and lost (with the reasons), and the lake version of its last commit."""

    group_id: str
    resumed: int = 0
    played: int = 0
    written: int = 0
    commits: int = 0
    version: int | None = None
    lost: list[dict] = field(default_factory=list)
    reward_sum: float = 0.0
    successes: int = 0

    @property
    def recorded(self) -> int:
        """The episodes played and recorded (lost ones have no record)."""
        return self.played - len(self.lost)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.recorded if self.recorded else 0.0


def _group_episodes(lake: Lake, prefix: str) -> tuple[str | None, set[str]]:
    """The newest group of a rollout with this prefix in the lake and the trajectory ids it holds."""
    like = prefix.replace("_", "\\_") + "-%"
    with lake.snapshot(for_query="SELECT group_id, trajectory_id, ingested_at FROM trajectories") as snap:
        rows = snap.arrow("SELECT group_id FROM trajectories WHERE group_id LIKE ? ESCAPE '\\' GROUP BY group_id "
                          "ORDER BY max(ingested_at) DESC LIMIT 1", [like]).column(0).to_pylist()
        if not rows:
            return None, set()
        ids = snap.arrow("SELECT trajectory_id FROM trajectories WHERE group_id = ?", [rows[0]]).column(0)
        return rows[0], set(ids.to_pylist())


def check_screenshots(folder: str, lake: Lake) -> None:
    """--screenshots follows `lake export`'s output rules (lake/output_folder.py: never inside a lake, also through a
    symbolic link or `..`; a place nothing can be written to is refused), checked before the first episode."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise RolloutInputError(f"--screenshots {folder}: not a folder")
    lakes = [] if is_url(str(lake.root)) else [Path(lake.root)]
    check_output_folder(folder, lakes=lakes, error=RolloutInputError)


def run_rollout(spec: RolloutSpec, lake_root=None, on_episode: Callable[[int, dict | EpisodeLost], None] | None = None,
                ) -> RolloutResult:
    """Play the rollout into the lake as it goes (see the module); `on_episode(index, record or EpisodeLost)` after
    each episode (progress)."""
    lake = Lake.init(lake_root)
    if spec.screenshots:
        check_screenshots(spec.screenshots, lake)
    prefix = rollout_prefix(spec)
    group, present = _group_episodes(lake, prefix) if spec.resume else (None, set())
    group = group or f"{prefix}-{uuid.uuid4().hex[:8]}"
    skip = frozenset(i for i in range(spec.episodes) if episode_id(group, i) in present)
    result = RolloutResult(group_id=group, resumed=len(skip))
    writer = process_writer_id("rollout")
    if spec.ray:  # the same episodes played on a Ray cluster's workers; written here all the same
        from ingest.rollout_ray import iter_ray_rollouts as episodes
    else:
        episodes = iter_rollouts
    pending: list[dict] = []
    last = time.monotonic()

    def commit() -> None:
        nonlocal pending, last
        last = time.monotonic()
        if not pending:
            return
        res = lake.append("trajectories", pending, writer_id=writer)
        result.written += res.rows
        result.commits += 1
        result.version = res.version
        pending = []

    try:
        for i, rec in episodes(spec, group_id=group, skip=skip):
            result.played += 1
            if isinstance(rec, EpisodeLost):
                result.lost.append({"episode": i, "reason": str(rec)})
            else:
                pending.append(rec)
                result.reward_sum += rec["reward"]
                result.successes += bool(rec["success"])
            if on_episode:
                on_episode(i, rec)
            if len(pending) >= spec.commit_every or time.monotonic() - last >= COMMIT_SECONDS:
                commit()
    finally:
        commit()
    return result

