"""Views benchmark: building the sft dataset through a lake snapshot vs the same SQL over one compacted Parquet
file (measured in the same run), and export throughput.

1. sft build: `SELECT * FROM sft ORDER BY split, sample_hash` to Arrow (what an export runs) on a lake snapshot
   whose trajectories arrived in --commits appends over 8 days (many files), vs the same views/*.sql registered
   on a plain DuckDB connection where `trajectories` is one zstd Parquet file holding the same rows.
   Target: ratio <= 1.3x.
2. export: `export_view(lake, "sft", ...)` end to end (snapshot, query, sort, parquet/jsonl files, manifest):
   rows/s of the trajectories it reads and of the dataset rows it writes.
3. streamed: the same rows arriving in time order in --stream-appends small appends (a file each, as group
   commits of a streaming server make them) with lake.autocompact.AutoCompactor running in the background at
   its default thresholds (what `lake serve` / `lake watch` run), then its next pass; the sft build on that
   lake vs one compacted file. Target: ratio <= 1.5x.

    python bench/bench_views.py                 # 100k rows, quick
    python bench/bench_views.py --rows 1000000  # the reported size
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from lake import Lake
from lake.autocompact import AutoCompactor, CompactThresholds
from lake.schemas import TABLES, table_schema
from views.export import export_view
from views.registry import register_views

SFT_QUERY = "SELECT * FROM sft ORDER BY split, sample_hash"

MESSAGE = pa.list_(pa.struct([
    ("role", pa.string()), ("content", pa.string()), ("reasoning", pa.string()),
    ("tool_calls", pa.list_(pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())]))),
    ("tool_call_id", pa.string()), ("name", pa.string()),
]))


def payload(n: int, start: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Array]:
    """n trajectory rows: 5 messages with a tool call, ~20k tasks, ~55% good, ~3% exact duplicate chats."""
    words = np.array(["alpha", "kemure", "rbmb8ud", "notes", "ledger", "zq1", "harbor", "vintage", "frost"])
    w = words[rng.integers(0, len(words), size=(n, 3))]
    num = rng.integers(0, 1_000_000, size=n)
    dup = rng.random(n) < 0.03
    num[dup] = 7  # same file name -> same chat for the same words
    results = rng.integers(0, 5000, size=n)
    results[dup] = 42
    ok = rng.random(n) < 0.45
    reward = np.where(ok, 1.0, np.round(rng.random(n), 3))
    messages = []
    for k in range(n):
        a, b, x = w[k]
        f = f"{x}/{a}_{b}{num[k]}.txt"
        cid = f"call_{k % 97}"
        messages.append([
            {"role": "system", "content": "You are a shell agent. Use the run tool."},
            {"role": "user", "content": f"Count the lines of {f} and report"},
            {"role": "assistant", "content": "", "reasoning": "I will count the lines with wc.",
             "tool_calls": [{"id": cid, "name": "run", "arguments": f'{{"command": "wc -l < {f}"}}'}]},
            {"role": "tool", "content": str(results[k]), "tool_call_id": cid, "name": "run"},
            {"role": "assistant", "content": f"The file has {results[k]} lines." if ok[k] else "I could not tell."},
        ])
    day0 = np.datetime64("2026-11-24T00:00:00", "us")
    occurred = day0 + (rng.integers(0, 8 * 86400, size=n) * 1_000_000).astype("timedelta64[us]")
    envs = np.array(["bash_exec_env", "git_repo_env", "python_debug_env", "hermes"])
    table = pa.table({
        "trajectory_id": [f"traj-{start + k:09d}" for k in range(n)],
        "task_id": [f"task-{v}" for v in rng.integers(0, 20_000, size=n)],
        "env": envs[rng.integers(0, 4, size=n)],
        "model": np.full(n, "hermes-3", dtype=object),
        "messages": pa.array(messages, MESSAGE),
        "reward": reward,
        "success": ok,
    })
    return table, pa.array(occurred, pa.timestamp("us", tz="UTC"))


def build_lake(root: Path, rows: int, commits: int, seed: int) -> Lake:
    lk = Lake.init(root)
    rng = np.random.default_rng(seed)
    per = -(-rows // commits)
    w = lk.default_writer
    for i in range(commits):
        n = min(per, rows - i * per)
        if n <= 0:
            break
        tbl, occ = payload(n, i * per, rng)
        w.submit_arrow("trajectories", tbl, occurred_at=occ).result()
    return lk


def build_streamed_lake(root: Path, rows: int, appends: int, seed: int) -> tuple[Lake, dict]:
    """`rows` in time order over 8 days in `appends` appends, auto-compacted in the background meanwhile."""
    lk = Lake.init(root)
    rng = np.random.default_rng(seed)
    per = -(-rows // appends)
    day0 = np.datetime64("2026-11-24T00:00:00", "us")
    step = 8 * 86400 * 1_000_000 // rows  # microseconds between two rows: 8 days in all
    compactor = AutoCompactor(lk.table_set, CompactThresholds(interval_s=1.0))
    with compactor:
        for i in range(appends):
            n = min(per, rows - i * per)
            if n <= 0:
                break
            tbl, _ = payload(n, i * per, rng)
            occurred = day0 + ((i * per + np.arange(n)) * step).astype("timedelta64[us]")
            lk.default_writer.submit_arrow("trajectories", tbl,
                                           occurred_at=pa.array(occurred, pa.timestamp("us", tz="UTC"))).result()
    files_before = sum(len(v) for v in lk.table_set.partition_files("trajectories").values())
    compactor.maybe_compact()  # the background thread's next pass
    files_after = sum(len(v) for v in lk.table_set.partition_files("trajectories").values())
    return lk, {"appends": appends, "compactions": len(compactor.compactions), "passes": compactor.passes,
                "files_when_streaming_stopped": files_before, "files_after_next_pass": files_after}


def compacted_connection(lk: Lake, single: Path) -> tuple[duckdb.DuckDBPyConnection, int]:
    """Plain DuckDB: `trajectories` over one Parquet file with the snapshot's rows, other tables empty,
    and the same views/*.sql registered."""
    snap = lk.snapshot(for_query="SELECT * FROM trajectories")
    files = snap.table_files("trajectories")
    snap.con.execute(f"COPY (SELECT * FROM trajectories) TO '{single}' (FORMAT parquet, COMPRESSION zstd, "
                     "ROW_GROUP_SIZE 131072)")
    snap.close()
    con = duckdb.connect()
    con.execute(f"CREATE VIEW trajectories AS SELECT * FROM read_parquet('{single}')")
    for t in TABLES:
        if t != "trajectories":
            con.register(f"__{t}", table_schema(t).empty_table())
            con.execute(f'CREATE VIEW "{t}" AS SELECT * FROM "__{t}"')
    errors = register_views(con)
    assert not errors, errors
    return con, len(files)


def interleaved(fns: dict, k: int) -> dict[str, float]:
    """Median seconds of each function over k rounds, run in rotation (so drifting machine load hits all of
    them alike), after one warm-up round; results are dropped between runs."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(k):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="trajectory rows (1000000 for the reported run)")
    ap.add_argument("--commits", type=int, default=20, help="appends the rows arrive in")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (median)")
    ap.add_argument("--stream-appends", type=int, default=400, help="appends of the streamed lake (0: skip it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp folder, removed)")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_views_"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"rows": args.rows, "commits": args.commits, "repeat": args.repeat,
                     "duckdb": duckdb.__version__, "threads": None}
    try:
        t = time.perf_counter()
        lk = build_lake(work / "lake", args.rows, args.commits, args.seed)
        results["fill_s"] = time.perf_counter() - t
        base, n_files = compacted_connection(lk, work / "single.parquet")
        results["threads"] = base.execute("SELECT current_setting('threads')").fetchall()[0][0]
        results["lake_files"] = n_files

        def via_compacted():
            return base.sql(SFT_QUERY).to_arrow_table().num_rows

        def via_lake_open_and_query():
            with lk.snapshot(for_query=SFT_QUERY) as s:
                return s.sql(SFT_QUERY).to_arrow_table().num_rows

        snap = lk.snapshot()

        def via_lake_query():
            return snap.sql(SFT_QUERY).to_arrow_table().num_rows

        a = base.sql(SFT_QUERY).to_arrow_table().select(["event_id"])
        b = snap.sql(SFT_QUERY).to_arrow_table().select(["event_id"])
        assert a.equals(b), "the lake and the compacted file give different datasets"
        results["sft_rows"] = a.num_rows
        del a, b
        t = interleaved({"base": via_compacted, "open": via_lake_open_and_query, "query": via_lake_query},
                        args.repeat)
        t_base, t_open, t_query = t["base"], t["open"], t["query"]
        results["sft_build"] = {
            "compacted_parquet_s": t_base, "lake_snapshot_s": t_open, "lake_query_only_s": t_query,
            "ratio": t_open / t_base, "ratio_query_only": t_query / t_base, "target": "<= 1.3x",
            "trajectory_rows_per_s": args.rows / t_open,
        }
        snap.close()
        if args.stream_appends:
            t = time.perf_counter()
            streamed, info = build_streamed_lake(work / "streamed", args.rows, args.stream_appends, args.seed)
            info["fill_s"] = time.perf_counter() - t
            sbase, _ = compacted_connection(streamed, work / "streamed_single.parquet")

            def via_streamed():
                with streamed.snapshot(for_query=SFT_QUERY) as s:
                    return s.sql(SFT_QUERY).to_arrow_table().num_rows

            t = interleaved({"base": lambda: sbase.sql(SFT_QUERY).to_arrow_table().num_rows,
                             "streamed": via_streamed}, args.repeat)
            results["streamed"] = {**info, "compacted_parquet_s": t["base"], "lake_snapshot_s": t["streamed"],
                                   "ratio": t["streamed"] / t["base"], "target": "<= 1.5x"}
        for fmt in ("parquet", "jsonl"):
            times = []
            for i in range(args.repeat):
                out = work / f"export_{fmt}_{i}"
                t = time.perf_counter()
                m = export_view(lk, "sft", out, format=fmt)
                times.append(time.perf_counter() - t)
                shutil.rmtree(out)
            t_exp = statistics.median(times)
            results[f"export_{fmt}"] = {"s": t_exp, "dataset_rows": m["row_count"],
                                        "dataset_rows_per_s": m["row_count"] / t_exp,
                                        "trajectory_rows_per_s": args.rows / t_exp}
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    sb = results["sft_build"]
    print(f"sft view over {args.rows:,} trajectory rows ({results['lake_files']} lake files, "
          f"{results['sft_rows']:,} dataset rows, {results['threads']} DuckDB threads)")
    print(f"  one compacted Parquet file   {sb['compacted_parquet_s']:.2f} s")
    print(f"  lake snapshot (open + query) {sb['lake_snapshot_s']:.2f} s   ratio {sb['ratio']:.2f}x (target <= 1.3x)")
    print(f"  lake snapshot (query only)   {sb['lake_query_only_s']:.2f} s   ratio {sb['ratio_query_only']:.2f}x")
    if "streamed" in results:
        st = results["streamed"]
        print(f"  streamed in {st['appends']} appends, auto-compacted ({st['compactions']} compactions; "
              f"{st['files_when_streaming_stopped']} files when streaming stopped, {st['files_after_next_pass']} "
              f"after the next pass): {st['lake_snapshot_s']:.2f} s against {st['compacted_parquet_s']:.2f} s, "
              f"ratio {st['ratio']:.2f}x (target <= 1.5x)")
    for fmt in ("parquet", "jsonl"):
        e = results[f"export_{fmt}"]
        print(f"  export {fmt:<8} {e['s']:.2f} s   {e['dataset_rows_per_s']:,.0f} dataset rows/s, "
              f"{e['trajectory_rows_per_s']:,.0f} trajectory rows/s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.json_out:
        bench_json.write(args.json_out, "views", results)


if __name__ == "__main__":
    main()
