"""bench/REPORT.md from the benchmarks' JSON files: one row per comparison against a baseline measured in the same
run, a PNG of the ratios, and (--update-docs) the tables of docs/results.md, so no figure is ever typed by hand.

Every benchmark writes `--json-out bench/results/<name>.json` (bench_json.write: its results plus date, machine
and load average); `just bench` runs them all, then this script. A file of another shape (bench_ingest's own
output before it wrapped its results) is read too: its date is the file's, its load the one it recorded.
A new benchmark needs no change here when its results hold `comparisons`: a list of {workload, baseline,
baseline_figure, figure, ratio, better ("higher" | "lower": which ratio is good), target (optional)}.

    python bench/report.py [--results bench/results] [--out bench/REPORT.md] [--update-docs]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE_BEGIN, TABLE_END = "<!-- report:table:begin -->", "<!-- report:table:end -->"
BENCH_BEGIN, BENCH_END = "<!-- bench:begin -->", "<!-- bench:end -->"
# the learning table of bench/learning.py's full run (its LEARNING.md), shown on the results page the same way
LEARNING_BEGIN, LEARNING_END = "<!-- learning:begin -->", "<!-- learning:end -->"
# and the pretrained model's run (bench/learning.py --model smollm2), where the page has these markers
SMOLLM2_BEGIN, SMOLLM2_END = "<!-- learning-smollm2:begin -->", "<!-- learning-smollm2:end -->"


@dataclass
class Row:
    bench: str
    workload: str
    baseline: str
    baseline_figure: str
    figure: str
    ratio: float | None
    better: str = "higher"  # which way the ratio is good: "higher" (a speed-up) or "lower" (a cost, a slow-down)
    target: str = ""
    date: str = ""
    machine: str = ""
    load: str = ""

    def met(self) -> bool | None:
        """The target checked against the ratio, when the target is a ratio bound such as '>= 10x' or '<= 1.3x'."""
        m = re.fullmatch(r"\s*(>=|<=|<|>)\s*([\d.]+)\s*x\s*", self.target or "")
        if not m or self.ratio is None:
            return None
        op, bound = m.group(1), float(m.group(2))
        return {">=": self.ratio >= bound, "<=": self.ratio <= bound, ">": self.ratio > bound,
                "<": self.ratio < bound}[op]

    def times_better(self) -> float | None:
        """How many times better than the baseline (below 1: worse), whichever way the ratio is written."""
        if not self.ratio:
            return None
        return self.ratio if self.better == "higher" else 1 / self.ratio


# ----------------------------------------------------------------------------------------------- figures
def secs(x: float) -> str:
    if x < 0.01:
        return f"{x * 1e3:.2f} ms"
    if x < 1:
        return f"{x * 1e3:.0f} ms"
    return f"{x:.2f} s"


def ms(x: float) -> str:
    return secs(x / 1e3)


def rate(x: float, unit: str) -> str:
    return f"{x:,.1f} {unit}" if x < 100 else f"{x:,.0f} {unit}"


def ratio_text(r: Row) -> str:
    return "" if r.ratio is None else f"{r.ratio:.2f}x"


def bar_label(r: Row) -> str:
    """The chart's label of a row: the table's ratio and which way it is good."""
    return f"{ratio_text(r)} ({r.better} is better)"


# ----------------------------------------------------------------------------------------------- one reader per bench
def lake_rows(res: list[dict]) -> list[Row]:
    baselines = [("group commit", "one Delta commit per batch"), ("bulk append with fsync", "the same append without fsync"),
                 ("bulk append", "pyarrow write_table (the ceiling)"), ("small commit", "the same commit without fsync"),
                 ("aggregate", "DuckDB on one compacted Parquet file"), ("same", "DuckDB on one compacted Parquet file"),
                 ("`lake sql`", "`python -c pass`")]
    rows = []
    for r in res:
        name = r["name"].strip()
        base = next(b for key, b in baselines if name.startswith(key))
        # bench_lake writes speed-ups as baseline/lake and costs as lake/baseline
        better = "higher" if math.isclose(r["ratio"], r["baseline_s"] / r["lake_s"]) else "lower"
        target = "" if r["target"] == "-" else r["target"]
        if name.startswith("`lake sql`"):  # its target is an absolute one
            target = ""
            name = f"{name} (target: the command under 1 s: {'met' if r['lake_s'] < 1 else 'missed'})"
        rows.append(Row("lake", name, base, secs(r["baseline_s"]), secs(r["lake_s"]), r["ratio"], better, target))
    return rows


def views_rows(res: dict) -> list[Row]:
    sb = res["sft_build"]
    base = "the same SQL on one compacted Parquet file"
    rows = [Row("views", f"sft dataset from {res['rows']:,} trajectory rows in {res['lake_files']} files, snapshot "
                         "opened inside the timing", base, secs(sb["compacted_parquet_s"]), secs(sb["lake_snapshot_s"]),
                sb["ratio"], "lower", sb["target"]),
            Row("views", "the same, query on an open snapshot", base, secs(sb["compacted_parquet_s"]),
                secs(sb["lake_query_only_s"]), sb["ratio_query_only"], "lower")]
    if "streamed" in res:
        st = res["streamed"]
        rows.append(Row("views", f"the same rows streamed in {st['appends']} appends, auto-compacted", base,
                        secs(st["compacted_parquet_s"]), secs(st["lake_snapshot_s"]), st["ratio"], "lower",
                        st["target"]))
    return rows


def envs_rows(res: dict) -> list[Row]:
    rows = [Row("envs", f"sandboxed env step `{s['command']}`", "bare subprocess.run of the command",
                ms(s["bare_ms"]), ms(s["env_step_ms"]), s["ratio"], "lower", "<= 2x") for s in res["steps"]]
    b = res.get("big_caller")
    if b:
        rows.append(Row("envs", f"env step from a {b['caller_mb']} MB caller", "forking the caller",
                        ms(b["fork_here_ms"]), ms(b["spawn_helper_ms"]), b["spawn_helper_ms"] / b["fork_here_ms"],
                        "lower"))
    return rows


def sft_rows(res: dict) -> list[Row]:
    a, b, a0 = res["ours"], res["trl"], res["ours_no_shared_prefix"]
    what = f"SFT tokens/s, tiny model, {res['mode']}, {res['examples']} chats"
    base = "plain TRL SFTTrainer"
    return [Row("sft", what, base, rate(b["tokens_per_s"], "tok/s"), rate(a["tokens_per_s"], "tok/s"), res["ratio"],
                "higher", ">= 1.0x"),
            Row("sft", "the same without shared-prefix batches", base, rate(b["tokens_per_s"], "tok/s"),
                rate(a0["tokens_per_s"], "tok/s"), res["ratio_no_shared_prefix"], "higher")]


def online_rows(res: dict) -> list[Row]:
    rounds, args = res["rounds"], res["args"]
    med = statistics.median
    where = f"{args['batch']} tasks x {args['group']} rollouts per step, {args['steps']} steps, {len(rounds)} rounds"
    base = "plain TRL GRPOTrainer (environment_factory)"
    rows = []
    for key, ratio_key, unit, what in (("rollouts_per_s", "rollouts_ratio", "rollouts/s", "online RL rollouts/s"),
                                       ("tokens_per_s", "tokens_ratio", "tok/s", "online RL training tokens/s")):
        ratios = [r[ratio_key] for r in rounds]
        rows.append(Row("online", f"{what} ({where}; ratio: median, range {min(ratios):.2f}-{max(ratios):.2f})",
                        base, rate(med([r["trl"][key] for r in rounds]), unit),
                        rate(med([r["ours"][key] for r in rounds]), unit), med(ratios), "higher"))
    return rows


def ingest_rows(res: dict) -> list[Row]:
    def by_c(levels):
        out: dict[int, list] = {}
        for lv in levels:
            out.setdefault(lv["clients"], []).append(lv)
        return out

    api, lake, native = by_c(res["run_api"]), by_c(res["lake"]), by_c(res["native"])
    mean = statistics.fmean
    rows = []
    for c in sorted(lake):
        a, o, n = api[c], lake[c][0], native[c][0]
        ack, p99 = mean(x["groups_per_s"] for x in a), mean(x["p99_ms"] for x in a)
        base = "atroposlib run-api (in memory; mean of the runs before and after)"
        rows.append(Row("ingest", f"durable ack of Atropos groups, {c} clients", base, rate(ack, "groups/s"),
                        rate(o["groups_per_s"], "groups/s"), o["groups_per_s"] / ack, "higher", ">= 1.0x"))
        rows.append(Row("ingest", f"p99 ack latency, {c} clients", base, ms(p99), ms(o["p99_ms"]), o["p99_ms"] / p99,
                        "lower", "<= 1.0x"))
        if o.get("e2e_groups_per_s") and all(x.get("e2e_groups_per_s") for x in a):
            e2e = mean(x["e2e_groups_per_s"] for x in a)
            rows.append(Row("ingest", f"acked and received by a trainer through /batch, {c} clients", base,
                            rate(e2e, "groups/s"), rate(o["e2e_groups_per_s"], "groups/s"),
                            o["e2e_groups_per_s"] / e2e, "higher", ">= 5x"))
        rows.append(Row("ingest", f"native POST /v1/trajectories, {c} clients", "the Atropos route on the same server",
                        rate(o["groups_per_s"], "groups/s"), rate(n["groups_per_s"], "groups/s"),
                        n["groups_per_s"] / o["groups_per_s"], "higher", ">= 1.0x"))
    return rows


def smollm2_rows(res: dict) -> list[Row]:
    rows = []
    if "generation_batched_vs_one_at_a_time" in res:
        rows.append(Row("smollm2", "SmolLM2-135M greedy generation, hermes_eval prompts (batched, KV cache)",
                        "plain transformers generate, one prompt at a time",
                        rate(res["generation_one_at_a_time_tokens_per_s"], "tok/s"),
                        rate(res["generation_batched_tokens_per_s"], "tok/s"), res["generation_batched_vs_one_at_a_time"]))
    if "sft_ours_vs_trl" in res:
        rows.append(Row("smollm2", "SmolLM2-135M LoRA SFT tokens/s", "plain TRL SFTTrainer",
                        rate(res["sft_trl_tokens_per_s"], "tok/s"), rate(res["sft_ours_tokens_per_s"], "tok/s"),
                        res["sft_ours_vs_trl"], "higher", ">= 1.0x"))
    return rows


def generic_rows(bench: str, res: dict) -> list[Row]:
    return [Row(bench, c["workload"], c["baseline"], str(c["baseline_figure"]), str(c["figure"]), c["ratio"],
                c.get("better", "higher"), c.get("target", "")) for c in res["comparisons"]]


READERS = {"lake": lake_rows, "views": views_rows, "envs": envs_rows, "sft": sft_rows, "online": online_rows,
           "ingest": ingest_rows, "smollm2": smollm2_rows}
ORDER = ["lake", "views", "ingest", "envs", "sft", "online", "generation", "smollm2", "watch"]


def load_file(path: Path) -> tuple[dict, object]:
    """(meta, results) of one results file, in bench_json's shape or a bench's bare output."""
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "meta" in data and "results" in data:
        return data["meta"], data["results"]
    meta = {"bench": path.stem, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime)),
            "machine": "not recorded"}
    loads = [lv["load"][0] for key in ("run_api", "lake", "native") for lv in data.get(key, [])
             if isinstance(data, dict) and lv.get("load")]
    if loads:
        meta["load_avg_1m"] = [round(min(loads), 2), round(max(loads), 2)]
    return meta, data


def collect(results: Path) -> tuple[list[Row], list[str]]:
    """Every row of every results file, in a fixed bench order; and the machines, numbered as the rows cite them."""
    files = sorted(results.glob("*.json"), key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else 99, p.stem))
    rows, machines = [], []
    for f in files:
        meta, res = load_file(f)
        bench = meta.get("bench", f.stem).removeprefix("bench_")
        if isinstance(res, dict) and "comparisons" in res:
            got = generic_rows(bench, res)
        elif bench in READERS:
            got = READERS[bench](res)
        else:
            continue
        if meta["machine"] not in machines:
            machines.append(meta["machine"])
        lo, hi = meta.get("load_avg_1m", [None, None])
        load = "" if lo is None else (f"{lo:.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f}")
        for r in got:
            r.date, r.machine, r.load = meta["date"], f"M{machines.index(meta['machine']) + 1}", load
        rows += got
    return rows, machines


# ----------------------------------------------------------------------------------------------- outputs
def markdown_table(rows: list[Row]) -> list[str]:
    out = ["| workload (bench) | baseline, same run | baseline | Lachesis | ratio | target | date, machine, load |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        met = r.met()
        target = r.target + ("" if met is None else (": met" if met else ": **missed**"))
        out.append(f"| {r.workload} (`bench_{r.bench}`) | {r.baseline} | {r.baseline_figure} | {r.figure} | "
                   f"**{ratio_text(r)}** | {target} | {r.date}, {r.machine}, load {r.load or '?'} |")
    return out


def report(rows: list[Row], machines: list[str], png: str | None) -> str:
    lines = ["# Benchmark report", "",
             f"Generated by `python bench/report.py` from bench/results/*.json ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); "
             "`just bench` runs every benchmark and then this script. Each row compares Lachesis with a baseline "
             "measured in the same run on the same machine; the ratio is the bench's own (the target says which way "
             "is better), load is the 1-minute load average at the start and end of that bench.", "",
             TABLE_BEGIN, *markdown_table(rows), "",
             "Machines: " + "; ".join(f"M{i + 1} = {m}" for i, m in enumerate(machines)) + ".", TABLE_END, ""]
    if png:
        lines += [f"![How many times better than the baseline, per comparison]({png})", ""]
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> Path:
    """The ratios' chart (ratio_figure) as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = ratio_figure(rows)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def ratio_figure(rows: list[Row]):
    """Horizontal bars: how many times better than its baseline each comparison is (log scale; 1 = equal),
    coloured by its target (met, missed, none), the target marked; each bar labelled with the ratio exactly as the
    results table writes it (a cost's 0.08x stays 0.08x, not its inverse 12.5), with which way is better."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.times_better()]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))
    ys = list(range(len(rows)))[::-1]
    colors = {True: "#2a9d5c", False: "#d1495b", None: "#8d99ae"}
    ax.barh(ys, [r.times_better() for r in rows], color=[colors[r.met()] for r in rows], height=0.65)
    for y, r in zip(ys, rows):
        m = re.search(r"([\d.]+)\s*x", r.target or "")
        if m and float(m.group(1)) > 0:
            bound = float(m.group(1))
            ax.plot([bound if r.better == "higher" else 1 / bound], [y], marker="|", color="black", markersize=12)
        ax.text(r.times_better() * 1.05, y, bar_label(r), va="center", fontsize=7)
    ax.set_yticks(ys, [f"{r.bench}: {r.workload if len(r.workload) < 56 else r.workload[:53] + '...'}" for r in rows],
                  fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xlabel("bar: times better than the same-run baseline (log; < 1: worse); label: the table's ratio; | = target")
    ax.set_title("Lachesis against its baselines (green: target met, red: missed, grey: no target)", fontsize=9)
    fig.subplots_adjust(left=0.4, right=0.97)
    return fig


def page_block(report_text: str) -> str:
    """The table and machine legend of REPORT.md, as the results page shows them (files outside docs/ are named in
    code, not linked: the docs site's strict build fails on a link it cannot follow)."""
    start, end = report_text.index(TABLE_BEGIN) + len(TABLE_BEGIN), report_text.index(TABLE_END)
    return ("\n*Generated from `bench/REPORT.md` by `python bench/report.py --update-docs`; "
            "do not edit by hand.*\n" + report_text[start:end].rstrip() + "\n")


def replace_between(page: str, begin: str, end: str, block: str) -> str:
    """Replace what lies between two of the page's markers; nothing outside them changes."""
    if begin not in page or end not in page:
        raise SystemExit(f"the page has no {begin} ... {end} markers around its generated table")
    head, rest = page.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + block + end + tail


def update_page(page: str, report_text: str) -> str:
    """Replace what lies between the results page's bench markers with REPORT.md's table."""
    return replace_between(page, BENCH_BEGIN, BENCH_END, page_block(report_text))


def learning_block(learning_text: str, link: str) -> str:
    """LEARNING.md as the results page shows it: its provenance line (command, date, machine, load, duration) and
    table, the curves named where they lie (`link`: LEARNING.md's folder, relative to the repository)."""
    lines = learning_text.splitlines()
    made = next((line for line in lines if line.startswith("Generated by")), None)
    table = [line for line in lines if line.startswith("|")]
    if made is None or not table:
        raise SystemExit(f"{link}/LEARNING.md has no 'Generated by' line or no table: rerun bench/learning.py")
    curves = next((line for line in lines if line.startswith("Curves")), "")
    curves = re.sub(r"\[[^\]]*\]\((learning_[^)]+\.png)\)", lambda m: f"`{link}/{m.group(1)}`", curves)
    return (f"\n*Generated from `{link}/LEARNING.md` by `python bench/report.py --update-docs`; "
            f"do not edit by hand.* {made}\n\n" + "\n".join(table) + "\n\n" + curves + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "REPORT.md")
    ap.add_argument("--update-docs", action="store_true",
                    help="also rewrite the results page's tables between their markers (--page)")
    ap.add_argument("--page", type=Path, default=ROOT / "docs" / "results.md",
                    help="the results page (default docs/results.md)")
    ap.add_argument("--learning", type=Path, default=ROOT / "bench" / "learning" / "LEARNING.md",
                    help="bench/learning.py's full-run table, copied into the page's learning markers when present")
    ap.add_argument("--learning-smollm2", type=Path, default=ROOT / "bench" / "learning" / "smollm2" / "LEARNING.md",
                    help="the --model smollm2 run's table, copied into the page's learning-smollm2 markers when "
                         "both are present")
    args = ap.parse_args()
    rows, machines = collect(args.results)
    if not rows:
        raise SystemExit(f"no benchmark results in {args.results}: run `just bench` (or a bench with --json-out)")
    png = plot(rows, args.out.with_name("report_ratios.png"))
    text = report(rows, machines, png.name)
    args.out.write_text(text)
    print(f"{args.out}: {len(rows)} comparisons from {len({r.bench for r in rows})} benchmarks; {png}")
    if args.update_docs:
        page_text = update_page(args.page.read_text(), text)
        if args.learning.exists():
            link = os.path.relpath(args.learning.parent, args.page.parent.parent)  # the page lies in docs/
            page_text = replace_between(page_text, LEARNING_BEGIN, LEARNING_END,
                                          learning_block(args.learning.read_text(), link))
        smollm2 = args.learning_smollm2.exists() and SMOLLM2_BEGIN in page_text
        if smollm2:
            link = os.path.relpath(args.learning_smollm2.parent, args.page.parent.parent)
            page_text = replace_between(page_text, SMOLLM2_BEGIN, SMOLLM2_END,
                                          learning_block(args.learning_smollm2.read_text(), link))
        args.page.write_text(page_text)
        print(f"{args.page}: benchmark table updated" + (" and the learning table" if args.learning.exists() else "")
              + (" and the smollm2 learning table" if smollm2 else ""))


if __name__ == "__main__":
    main()
