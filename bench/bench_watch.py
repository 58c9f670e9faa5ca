"""The streaming trainer: commit -> first training step, and a small increment resident vs a new process per
increment, in the same run.

Two lakes, the same batches, the same training settings (the tiny model unless --model, --steps optimizer steps
per increment, batch 8, 1 thread):
- resident: one `lake train watch --json` process, started once (imports and model load paid before the first
  commit); per increment the bench appends --rows trajectories and reads the watcher's `increment` event.
  Reported: commit -> first training step (the step's wall clock in the runs event minus the moment the append
  returned: the commit is durable then) and commit -> increment written (weights, optimizer, offsets, runs event);
- process per increment: the same appends, each followed by `lake train watch --once` in a new interpreter, timed
  from its start to its exit (imports, model load, reading the lake, the same training, the same checkpoint).
The sides alternate per increment so a change of the machine's load hits both. Targets (issue 16):
commit -> first step < 2 s; resident <= 0.2 x process per increment. The 1-minute load is printed with the figures.

usage: python bench/bench_watch.py [--increments 5] [--rows 8] [--steps 4] [--model tiny] [--json-out PATH]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def lake_argv(*args: str) -> list[str]:
    return [sys.executable, "-P", "-c", "from lachesis.cli import main; main()", *args]


def watch_args(lake: Path, folder: Path, a) -> list[str]:
    return ["train", "watch", "--lake", str(lake), "--output", str(folder), "--json", "--model", a.model, "--split",
            "all", "--max-steps", str(a.steps), "--batch-size", "8", "--threads", "1", "--replay", "0.25"]


def batch(i: int, rows: int) -> list[dict]:
    from views_helpers import seeded_trajectories

    out = seeded_trajectories(rows, seed=i, start=10_000 * (i + 1))
    for r in out:
        r["success"], r["reward"] = True, 1.0
    return out


def read_event(proc: subprocess.Popen, kind: str, timeout: float = 300) -> dict:
    t0 = time.monotonic()
    for line in proc.stdout:
        rec = json.loads(line)
        if rec["event"] == kind:
            return rec
        if time.monotonic() - t0 > timeout:
            break
    raise RuntimeError(f"the watcher ended without a {kind!r} event: {proc.stderr.read()[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--increments", type=int, default=5)
    ap.add_argument("--rows", type=int, default=8, help="trajectories per increment")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per increment")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    from lake import Lake

    work = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    res_lake, proc_lake = Lake.init(work / "resident-lake"), Lake.init(work / "process-lake")
    resident = subprocess.Popen(lake_argv(*watch_args(res_lake.root, work / "resident", a)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t_start = time.monotonic()
    read_event(resident, "ready")
    startup = time.monotonic() - t_start
    to_first, to_written, per_process = [], [], []
    try:
        for i in range(a.increments):
            res_lake.append("trajectories", batch(i, a.rows))
            committed = time.time()
            ev = read_event(resident, "increment")
            to_first.append(ev["first_step_at"] - committed)
            to_written.append(time.time() - committed)

            proc_lake.append("trajectories", batch(i, a.rows))
            t0 = time.monotonic()
            once = subprocess.run(lake_argv(*watch_args(proc_lake.root, work / "process", a), "--once"),
                                  capture_output=True, text=True)
            per_process.append(time.monotonic() - t0)
            if once.returncode != 0:
                raise RuntimeError(once.stderr[-2000:])
            print(f"increment {i + 1}: commit -> first step {to_first[-1]:.2f} s, -> written {to_written[-1]:.2f} s; "
                  f"process per increment {per_process[-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        resident.terminate()
        resident.wait(30)
    med = statistics.median
    results = {
        "increments": a.increments, "rows_per_increment": a.rows, "steps_per_increment": a.steps, "model": a.model,
        "resident_startup_s": round(startup, 3),
        "commit_to_first_step_s": {"median": round(med(to_first), 3), "max": round(max(to_first), 3)},
        "resident_increment_s": {"median": round(med(to_written), 3), "max": round(max(to_written), 3)},
        "process_per_increment_s": {"median": round(med(per_process), 3), "min": round(min(per_process), 3)},
        "ratio_resident_vs_process": round(med(to_written) / med(per_process), 3),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
    }
    where = f"tiny model, {a.rows} rows / {a.steps} steps per increment" if a.model == "tiny" else \
        f"{a.model}, {a.rows} rows / {a.steps} steps per increment"
    results["comparisons"] = [  # bench/report.py's rows
        {"workload": f"streaming trainer: one small increment, commit -> written ({where})",
         "baseline": "a new process per increment (lake train watch --once)",
         "baseline_figure": f"{med(per_process):.2f} s", "figure": f"{med(to_written):.2f} s",
         "ratio": results["ratio_resident_vs_process"], "better": "lower", "target": "<= 0.2x"},
        {"workload": f"streaming trainer: commit -> first training step ({where})",
         "baseline": "the 2 s target", "baseline_figure": "2.00 s", "figure": f"{med(to_first):.2f} s",
         "ratio": round(med(to_first) / 2.0, 3), "better": "lower", "target": "< 1x"},
    ]
    print(json.dumps(results, indent=1))
    print(f"commit -> first training step: median {med(to_first):.2f} s (target < 2 s)")
    print(f"resident / process per increment: {results['ratio_resident_vs_process']:.3f}x (target <= 0.2x)")
    if a.json_out:
        bench_json.write(a.json_out, "bench_watch", results)


if __name__ == "__main__":
    main()
