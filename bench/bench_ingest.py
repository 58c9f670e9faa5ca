#!/usr/bin/env python3
"""Ingest benchmark: `lake serve` (durable: a 2xx means a committed Delta version) against atroposlib 0.4.0's
run-api (in memory), driven by the same client in the same run, printed as ratios.

The driver is bench/atropos_ingest_bench.py. run-api needs a Python with atroposlib: `--atropos-python` or
$ATROPOS_PYTHON (build one with `bash tests/data/make_atropos_venv.sh DIR`, then give DIR/bin/python).
run-api is measured before and after `lake serve` (the machine may be shared: its figures are the mean of the
two). Also measured on the same server: the native POST /v1/trajectories with the same sequences (4 records
a request), how long after an ack a fresh `lake sql` process sees the row, and what fsync costs: the Atropos
route again on a server started with `--no-fsync` (acks then survive a killed server, not a power loss).
`--baseline-ref REF` also measures `lake serve` as of git commit REF (its tree from `git archive`), in the same
run: a before/after of a change to the write path. Every figure carries the load average at its end.

  .venv/bin/python bench/bench_ingest.py [--atropos-python PY] [-n 300] [-c 8 32] [--baseline-ref REF]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import atropos_ingest_bench as drv  # noqa: E402
import bench_json  # noqa: E402
from lake import Lake  # noqa: E402
from tests.ingest_helpers import ServerProcess, free_port, lake_cmd  # noqa: E402


class RunApi:
    """atroposlib's run-api on a loopback port, as users start it (uvicorn, its default logging)."""

    def __init__(self, python: str, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([python, "-m", "atroposlib.cli.run_api", "--host", "127.0.0.1",
                                      "--port", str(self.port)], stdout=self.log, stderr=self.log)

    def __enter__(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"run-api exited with {self.proc.returncode} (log: {self.log.name})")
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.__exit__()
        sys.exit("run-api did not answer within 60 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def visibility(url: str, lake_root: Path, samples: int = 5) -> tuple[float, float]:
    """After each ack, run the real `lake sql` until it prints the row. -> (share found by the first run,
    median ms from the ack until `lake sql` printed it, process start included)."""
    times, first = [], 0
    for i in range(samples):
        tid = f"vis-{time.time_ns()}-{i}"
        httpx.post(url + "/v1/trajectories", json={"trajectory_id": tid, "messages": []}).raise_for_status()
        t0, tries = time.perf_counter(), 0
        while True:
            tries += 1
            r = subprocess.run(lake_cmd() + ["sql", "--lake", str(lake_root),
                                             f"SELECT trajectory_id FROM trajectories WHERE trajectory_id = '{tid}'"],
                               capture_output=True, text=True)
            if tid in r.stdout:
                break
        first += tries == 1
        times.append(time.perf_counter() - t0)
    return first / samples, statistics.median(times) * 1000


def by_clients(levels: list[drv.Level]) -> dict[int, drv.Level]:
    return {lv.clients: lv for lv in levels}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--atropos-python", default=os.environ.get("ATROPOS_PYTHON"),
                    help="a Python with atroposlib 0.4.0 for run-api (default: $ATROPOS_PYTHON)")
    ap.add_argument("-n", type=int, default=300, help="groups per level")
    ap.add_argument("-c", type=int, nargs="+", default=[8, 32], help="closed-loop clients per level")
    ap.add_argument("--json-out", help="write every level as JSON here")
    ap.add_argument("--baseline-ref", help="also measure `lake serve` as of this git commit (before/after)")
    ap.add_argument("--no-fsync-run", action="store_false", dest="fsync_run",
                    help="skip the run that measures what fsync costs")
    args = ap.parse_args()
    py = args.atropos_python
    if not py or not Path(py).exists():
        sys.exit("needs a Python with atroposlib 0.4.0 for run-api: --atropos-python PY or ATROPOS_PYTHON "
                 "(build one with `bash tests/data/make_atropos_venv.sh DIR`, then PY is DIR/bin/python)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    print(f"# bench_ingest {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}; N={args.n} groups per level, C={args.c}", flush=True)
    ceiling = drv.parse_ceiling()
    print("parse ceiling: " + ", ".join(f"{k} {v:.2f} ms/group" for k, v in ceiling.items()), flush=True)

    def run_api():
        with RunApi(py, tmp / "run-api.log") as api:
            return asyncio.run(drv.run_levels(api.url, args.n, args.c, pid=api.proc.pid))

    def lake_serve(name: str, extra=(), cwd: Path | None = None) -> list[drv.Level]:
        Lake.init(tmp / name)
        with ServerProcess(tmp / name, log_path=tmp / f"{name}.log", extra=list(extra), cwd=cwd) as srv:
            return asyncio.run(drv.run_levels(srv.url, args.n, args.c, pid=srv.proc.pid))

    baseline_tree = source_tree(args.baseline_ref, tmp) if args.baseline_ref else None
    base = run_api()
    before = lake_serve("lake-baseline", cwd=baseline_tree) if baseline_tree else None
    Lake.init(tmp / "lake")
    with ServerProcess(tmp / "lake", log_path=tmp / "serve.log") as srv:
        ours = asyncio.run(drv.run_levels(srv.url, args.n, args.c, pid=srv.proc.pid))
        native = asyncio.run(drv.run_levels(srv.url, args.n, args.c, pid=srv.proc.pid, native=True))
        found_first, vis_ms = visibility(srv.url, tmp / "lake")
    unsynced = lake_serve("lake-nofsync", ["--no-fsync"]) if args.fsync_run else None
    base2 = run_api()  # a second run-api measurement brackets ours: the machine is shared

    print("\n| C | run-api ack g/s | lake ack g/s | ratio | run-api p99 ms | lake p99 ms | run-api e2e g/s | "
          "lake e2e g/s | e2e ratio | native ack g/s | native p99 ms | native/atropos per event | load |")
    print("|---" * 13 + "|")
    b1, b2, o, nat = by_clients(base), by_clients(base2), by_clients(ours), by_clients(native)
    for c in args.c:
        ack = statistics.mean([b1[c].groups_per_s, b2[c].groups_per_s])
        p99 = statistics.mean([b1[c].p99_ms, b2[c].p99_ms])
        e2e = statistics.mean([b1[c].e2e_groups_per_s, b2[c].e2e_groups_per_s])
        loads = [lv.load[0] for lv in (b1[c], o[c], nat[c], b2[c])]
        print(f"| {c} | {ack:.1f} | {o[c].groups_per_s:.1f} | {o[c].groups_per_s / ack:.2f}x | {p99:.0f} | "
              f"{o[c].p99_ms:.0f} | {e2e:.1f} | {o[c].e2e_groups_per_s:.1f} | {o[c].e2e_groups_per_s / e2e:.2f}x | "
              f"{nat[c].groups_per_s:.1f} | {nat[c].p99_ms:.0f} | {nat[c].groups_per_s / o[c].groups_per_s:.2f}x | "
              f"{min(loads):.2f}-{max(loads):.2f} |")
    print(f"\nafter an ack the first `lake sql` run found the row in {found_first:.0%} of samples; ack -> printed "
          f"(process start included): median {vis_ms:.0f} ms")
    if unsynced:
        print_pair("what fsync costs: the Atropos route, fsync on (a 2xx survives a power loss) / off", "fsync on",
                   ours, "fsync off", unsynced, args.c)
    if before:
        print_pair(f"before/after: `lake serve` as of {args.baseline_ref} / now", "before", before, "now", ours,
                   args.c)
    if args.json_out:
        bench_json.write(args.json_out, "ingest", {
            "ceiling_ms": ceiling, "run_api": [asdict(lv) for lv in base + base2],
            "lake": [asdict(lv) for lv in ours], "native": [asdict(lv) for lv in native],
            "lake_no_fsync": [asdict(lv) for lv in unsynced or []],
            "lake_baseline": [asdict(lv) for lv in before or []]})


def print_pair(title: str, a_name: str, a: list[drv.Level], b_name: str, b: list[drv.Level], clients: list[int]):
    """A table of two lake runs side by side: ack rate, its ratio (b / a), latencies and CPU per group."""
    a, b = by_clients(a), by_clients(b)
    print(f"\n{title}\n\n| C | {a_name} ack g/s | {b_name} ack g/s | ratio | {a_name} p50 / p99 ms | "
          f"{b_name} p50 / p99 ms | {a_name} CPU ms/group | {b_name} CPU ms/group | load |")
    print("|---" * 9 + "|")
    for c in clients:
        x, y = a[c], b[c]
        print(f"| {c} | {x.groups_per_s:.1f} | {y.groups_per_s:.1f} | {y.groups_per_s / x.groups_per_s:.2f}x | "
              f"{x.p50_ms:.0f} / {x.p99_ms:.0f} | {y.p50_ms:.0f} / {y.p99_ms:.0f} | {x.server_ms_per_group or 0:.1f} | "
              f"{y.server_ms_per_group or 0:.1f} | {x.load[0]:.2f}-{y.load[0]:.2f} |")


def source_tree(ref: str, tmp: Path) -> Path:
    """The project's code as of git commit `ref`, unpacked from `git archive` (a server run from it imports
    that code: `python -c` puts the working directory first on sys.path)."""
    out = tmp / f"tree-{ref}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


if __name__ == "__main__":
    main()
