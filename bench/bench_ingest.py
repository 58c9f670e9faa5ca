#!/usr/bin/env python3
"""Ingest benchmark: `lake serve` against atroposlib's own run-api, same client, same run, printed as ratios.

The client is bench/atropos_ingest_bench.py (public wire contract: realistic 167 KB groups, gzip like BaseEnv,
C closed-loop env clients while a trainer drains /batch). It needs aiohttp and run-api, so it runs under a Python with atroposlib ($ATROPOS_PYTHON, default
/tmp/atropos-venv/bin/python; see tests/test_server_atropos.py for how that venv is made).

Also measured here, with the same payloads: the native POST /v1/trajectories (4 native records per group),
and how long after an ack the event is visible to a fresh lake snapshot (what `lake sql` reads).

  .venv/bin/python bench/bench_ingest.py [-n 300] [-c 8 32] [--repeats 1]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DRIVER = Path(os.environ.get("INGEST_BENCH_DRIVER", ROOT / "bench" / "atropos_ingest_bench.py"))
PY = os.environ.get("ATROPOS_PYTHON", "/tmp/atropos-venv/bin/python")


def drive(args, extra, json_out):
    cmd = [PY, str(DRIVER), *extra, "-n", str(args.n), "-c", *map(str, args.c), "--repeats", str(args.repeats),
           "--json-out", json_out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    summary = [line for line in r.stdout.splitlines() if line.startswith("SUMMARY")]
    if r.returncode != 0 or not summary:
        sys.exit(f"driver failed ({r.returncode}): {r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    print(summary[-1], flush=True)
    return json.load(open(json_out))["results"]


def med(results, conc, key):
    vals = [r[key] for r in results if r["concurrency"] == conc and r.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")


async def native_load(url, bodies, conc, n):
    import httpx

    lat = []
    sent = 0
    lock = asyncio.Lock()

    async def worker(k):
        nonlocal sent
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            while True:
                async with lock:
                    if sent >= n:
                        return
                    i = sent
                    sent += 1
                body = bodies[i % len(bodies)](i)
                t0 = time.perf_counter()
                r = await c.post("/v1/trajectories", content=body, headers={"Content-Encoding": "gzip",
                                                                            "Content-Type": "application/json"})
                r.raise_for_status()
                lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(conc)))
    wall = time.perf_counter() - t0
    lat.sort()
    return {"groups_per_s": n / wall, "p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99)] * 1000}


def native_bodies(k=32):
    import gzip

    import orjson

    sys.path.insert(0, str(DRIVER.parent))
    import atropos_ingest_bench as B

    groups, _ = B.build_bodies(k, 0, 1234)

    def make(g):
        def body(i):
            recs = [{"trajectory_id": f"b{i}-{j}", "group_id": f"b{i}", "messages": g["messages"][j],
                     "tokens": g["tokens"][j], "masks": g["masks"][j], "reward": g["scores"][j],
                     "inference_logprobs": g["inference_logprobs"][j], "overrides": g["overrides"][j]}
                    for j in range(len(g["tokens"]))]
            return gzip.compress(orjson.dumps(recs), compresslevel=6)
        return body
    return [make(g) for g in groups]


def visibility(url, lake_root, samples=5):
    """After each ack run the real `lake sql` CLI for the row. Returns (fraction found by the first `lake sql`
    run, median and max ms from the ack until `lake sql` printed it, process start included)."""
    import httpx

    from tests.ingest_helpers import lake_cmd

    out, first = [], 0
    with httpx.Client(base_url=url, timeout=30) as c:
        for i in range(samples):
            tid = f"vis-{time.time_ns()}-{i}"
            c.post("/v1/trajectories", json={"trajectory_id": tid, "messages": [{"role": "user", "content": "v"}]})
            t0 = time.perf_counter()
            tries = 0
            while True:
                tries += 1
                r = subprocess.run(lake_cmd() + ["sql", "--lake", str(lake_root),
                                                 f"SELECT trajectory_id FROM trajectories WHERE trajectory_id = '{tid}'"],
                                   capture_output=True, text=True)
                if tid in r.stdout:
                    break
            first += tries == 1
            out.append(time.perf_counter() - t0)
    return first / samples, statistics.median(out) * 1000, max(out) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="groups per concurrency level")
    ap.add_argument("-c", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if not Path(PY).exists() or not DRIVER.exists():
        sys.exit(f"needs {PY} (atroposlib + aiohttp) and the driver {DRIVER}")
    from tests.ingest_helpers import ServerProcess
    from lake import Lake

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    print(f"# run-api (atroposlib 0.4.0, in memory) vs lake serve (durable), N={args.n}, C={args.c}", flush=True)
    base = drive(args, ["--start-run-api"], str(tmp / "runapi.json"))
    Lake.init(tmp / "lake")
    with ServerProcess(tmp / "lake", log_path=tmp / "serve.log") as srv:
        ours = drive(args, [srv.url, "--server-pid", str(srv.proc.pid)], str(tmp / "lake.json"))
        bodies = native_bodies()
        native = {c: asyncio.run(native_load(srv.url, bodies, c, args.n)) for c in args.c}
        vis = visibility(srv.url, tmp / "lake")
    Lake.init(tmp / "lake-fast")
    with ServerProcess(tmp / "lake-fast", extra=["--serve-mode", "at-most-once"], log_path=tmp / "serve.log") as srv:
        fast = drive(args, [srv.url, "--server-pid", str(srv.proc.pid)], str(tmp / "lake-fast.json"))
    base2 = drive(args, ["--start-run-api"], str(tmp / "runapi2.json"))  # bracket ours: the machine is shared
    print("\n| C | run-api ack g/s | lake ack g/s | ratio | run-api p99 ms | lake p99 ms | run-api e2e g/s | "
          "lake e2e g/s | e2e ratio | native ack g/s | native p99 ms | at-most-once: ack g/s | p99 ms | "
          "e2e g/s | e2e ratio |")
    print("|---" * 16 + "|")
    for c in args.c:
        b_ack = statistics.mean([med(base, c, "groups_per_s"), med(base2, c, "groups_per_s")])
        b_e2e = statistics.mean([med(base, c, "e2e_groups_per_s"), med(base2, c, "e2e_groups_per_s")])
        b_p99 = statistics.mean([med(base, c, "p99_ms"), med(base2, c, "p99_ms")])
        o_ack, o_e2e, o_p99 = med(ours, c, "groups_per_s"), med(ours, c, "e2e_groups_per_s"), med(ours, c, "p99_ms")
        print(f"| {c} | {b_ack:.1f} | {o_ack:.1f} | {o_ack / b_ack:.2f}x | {b_p99:.0f} | {o_p99:.0f} | {b_e2e:.1f} | "
              f"{o_e2e:.1f} | {o_e2e / b_e2e:.2f}x | {native[c]['groups_per_s']:.1f} | {native[c]['p99_ms']:.0f} | "
              f"{med(fast, c, 'groups_per_s'):.1f} | {med(fast, c, 'p99_ms'):.0f} | {med(fast, c, 'e2e_groups_per_s'):.1f} | "
              f"{med(fast, c, 'e2e_groups_per_s') / b_e2e:.2f}x |")
    print(f"\nafter an ack, the first `lake sql` run found the row in {vis[0]:.0%} of samples; ack -> `lake sql` "
          f"printed it (process start included): median {vis[1]:.0f} ms, max {vis[2]:.0f} ms")
    print(f"RATIO ack@{args.c[-1]} {med(ours, args.c[-1], 'groups_per_s') / med(base, args.c[-1], 'groups_per_s'):.2f}x")


if __name__ == "__main__":
    main()
