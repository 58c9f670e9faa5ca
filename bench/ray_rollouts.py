"""Rollouts and evaluation on Ray workers against the one-process run, in the same script on the same machine: web
expert rollouts/s (`lake rollout --env web_form_env --policy expert`) and `hermes_eval` episodes/s (tiny model,
bash test tasks) with 1, 2 and 4 Ray workers on a cluster started here, each against today's one-process run
(`--workers 1`, no Ray), and Ray's overhead per episode (1 Ray worker against one process).

    python bench/ray_rollouts.py                                   # print
    python bench/ray_rollouts.py --json-out bench/results/ray_rollouts.json && python bench/report.py

The cluster is one local Ray instance with 4 CPUs (placement/ray_cluster.py's sizing), started once; a Ray
run's time includes starting its workers (each with its own environment, browser or model), as a command pays it.
On a 2-core machine more workers than cores cannot go faster: the figures say what Ray costs here, not what a
cluster of machines gains.
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def rollouts(episodes: int, ray: str | None, workers: int) -> dict:
    from ingest.rollout import run_rollout
    from ingest.rollout_config import RolloutSpec

    with tempfile.TemporaryDirectory() as lake:
        spec = RolloutSpec(env="web_form_env", policy="expert", episodes=episodes, split="test", workers=workers,
                           ray=ray)
        t0 = time.perf_counter()
        res = run_rollout(spec, lake)
        wall = time.perf_counter() - t0
    return {"episodes": res.recorded, "wall_s": round(wall, 2), "per_s": round(res.recorded / wall, 3),
            "success": round(res.successes / max(1, res.recorded), 3), "lost": len(res.lost)}


def evaluation(tasks: int, ray: str | None, workers: int) -> dict:
    from trainers.eval.config import EvalSettings
    from trainers.eval.evaluate import run_eval

    s = EvalSettings(task="shell", split="test", limit=tasks, max_new_tokens=32, record_in_lake=False,
                     progress=False, ray=ray, workers=workers)
    t0 = time.perf_counter()
    out = run_eval(s)
    wall = time.perf_counter() - t0
    return {"episodes": out["episodes"], "wall_s": round(wall, 2), "per_s": round(out["episodes"] / wall, 3),
            "success_rate": out["success_rate"], "per_task": [r["turns"] for r in out["per_task"]]}


def comparisons(r: dict) -> list[dict]:
    rows = []
    for key, what, unit in (("rollouts", "web expert rollouts/s (web_form_env, test split", "rollouts/s"),
                            ("eval", "hermes_eval episodes/s (tiny, bash test tasks", "episodes/s")):
        one = r[key]["one_process"]
        for w, got in r[key]["ray"].items():
            rows.append({"workload": f"{what}, {one['episodes']} episodes), {w} Ray worker{'s' if w != '1' else ''}",
                         "baseline": "one process (--workers 1, no Ray), same run",
                         "baseline_figure": f"{one['per_s']:.2f} {unit}", "figure": f"{got['per_s']:.2f} {unit}",
                         "ratio": round(got["per_s"] / one["per_s"], 2), "better": "higher"})
        one_ray = r[key]["ray"]["1"]
        rows.append({"workload": f"Ray's cost per episode, {what.split(' (')[0]} (1 Ray worker, worker start included)",
                     "baseline": "one process, same run", "baseline_figure": f"{one['wall_s'] / one['episodes']:.3f} s",
                     "figure": f"{one_ray['wall_s'] / one_ray['episodes']:.3f} s",
                     "ratio": round((one_ray["wall_s"] / one_ray["episodes"]) / (one["wall_s"] / one["episodes"]), 2),
                     "better": "lower"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=24, help="web expert episodes per run")
    ap.add_argument("--tasks", type=int, default=16, help="hermes_eval tasks per run")
    ap.add_argument("--workers", default="1,2,4", help="Ray worker counts, comma-separated")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    from envs.web import browser as browsers
    from placement import ray_cluster

    reason = browsers.missing()
    if reason:
        raise SystemExit(reason)
    r: dict = {"rollouts": {"one_process": rollouts(args.episodes, None, 1), "ray": {}},
               "eval": {"one_process": evaluation(args.tasks, None, 1), "ray": {}}}
    with ray_cluster.connected("local", num_cpus=max(counts)):  # one cluster for every Ray run (its start apart)
        for w in counts:
            r["rollouts"]["ray"][str(w)] = rollouts(args.episodes, "local", w)
            r["eval"]["ray"][str(w)] = evaluation(args.tasks, "local", w)
            same = r["eval"]["ray"][str(w)]["per_task"] == r["eval"]["one_process"]["per_task"]
            r["eval"]["ray"][str(w)]["same_as_one_process"] = same
            print(f"{w} Ray workers: rollouts {r['rollouts']['ray'][str(w)]}, eval {r['eval']['ray'][str(w)]['per_s']}"
                  f" episodes/s (same turns as one process: {same})", flush=True)
    r["comparisons"] = comparisons(r)
    print(json.dumps(r["comparisons"], indent=1))
    if args.json_out:
        bench_json.write(args.json_out, "ray_rollouts", r)
    browsers.pool().shutdown()  # the one-process run's browser (the process-wide pool; Ray workers shut their own)
    left = browsers.leftovers()
    if left:
        raise SystemExit(f"browser processes left: {left}")


if __name__ == "__main__":
    main()
