"""The web scaling curve (issue 45): what SFT of a model on web_form_env reaches as expert episodes, steps and
generated form tasks grow, gathered from every bench/web_learning/<run>/web_learning.json of one model.

Each point is one (expert episodes, generated episodes, SFT steps) setting of bench/web_learning.py: test success
(unseen seeds of the 25 trained tasks) and held-out success (test_families: 6 MiniWoB tasks never trained), means
over its seeds, with first-call validity. A setting evaluated on fewer held-out episodes than --min-heldout is left
out of the plot (its figures are too coarse to read a curve from) but kept in the table.

    python bench/web_scaling.py                      # bench/web_learning/SCALING.md and scaling.png
    python bench/web_scaling.py --model smollm2 --min-heldout 60
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "bench" / "web_learning"


def points(model: str, runs: Path = RUNS) -> list[dict]:
    """One row per (expert, generated, steps) setting: seeds, test and held-out success, evaluation sizes."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    base: dict[tuple, dict] = {}
    for saved in sorted(runs.glob("*/web_learning.json")):
        data = json.loads(saved.read_text())
        if data.get("model") != model:
            continue
        for r in data["records"]:
            key = (data["expert"], data.get("generated") or 0, r["step"], data["batch"], data["size"]["eval_limit"],
                   data["size"]["families_limit"])
            groups[key].append({**r, "from": saved.parent.name})
            base[key] = data["base"]
    rows = []
    for (expert, generated, steps, batch, test_n, heldout_n), recs in sorted(groups.items()):
        seeds = {r["seed"]: r for r in recs}  # one record per seed (a rerun of a seed replaces it)
        rs = list(seeds.values())
        rows.append({"expert": expert, "generated": generated, "steps": steps, "batch": batch, "seeds": sorted(seeds),
                     "test": mean(r["success"] for r in rs), "heldout": mean(r["fam_success"] for r in rs),
                     "heldout_each": [round(r["fam_success"], 3) for r in rs],
                     "test_each": [round(r["success"], 3) for r in rs],
                     "first_valid": mean(r.get("fam_first_valid", 0.0) for r in rs),
                     "test_n": test_n, "heldout_n": heldout_n,
                     "base_test": base[(expert, generated, steps, batch, test_n, heldout_n)]["success"],
                     "base_heldout": base[(expert, generated, steps, batch, test_n, heldout_n)]["fam_success"],
                     "runs": sorted({r["from"] for r in rs})})
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = ["| expert episodes | generated episodes | SFT steps x batch (seen) | seeds | test success (n) | held-out success (n) "
             "| held-out first call valid | base test / held-out | runs |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['expert']} | {r['generated']} | {r['steps']} x {r['batch']} ({r['steps'] * r['batch']:,}) | {len(r['seeds'])} | "
                     f"{r['test']:.2f} {r['test_each']} ({r['test_n']}) | {r['heldout']:.2f} {r['heldout_each']} "
                     f"({r['heldout_n']}) | {r['first_valid']:.2f} | {r['base_test']:.2f} / {r['base_heldout']:.2f} | "
                     f"{', '.join(r['runs'])} |")
    return lines


def plot(rows: list[dict], png: Path, min_heldout: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    # x: the conversations SFT trained on (steps x batch), not the episodes in the lake: at 24 x 8 a run sees 192
    # of them whether the lake holds 200 or 4,000; each point is labelled with its lake
    lines: dict[bool, list[dict]] = defaultdict(list)
    for r in rows:
        if r["heldout_n"] >= min_heldout:
            lines[r["generated"] > 0].append(r)
    for gen, rs in sorted(lines.items()):
        rs.sort(key=lambda r: (r["steps"] * r["batch"], r["expert"]))
        ax.plot([r["steps"] * r["batch"] for r in rs], [r["heldout"] for r in rs], marker="s" if gen else "o",
                linestyle="--" if gen else "-", label="MiniWoB + generated tasks" if gen else "MiniWoB only")
        for r in rs:
            seen = r["steps"] * r["batch"]
            ax.scatter([seen] * len(r["heldout_each"]), r["heldout_each"], s=12, color="grey", zorder=3)
            lake = f"{r['expert']:,}" + (f"+{r['generated']:,}g" if gen else "")
            # the label above the higher of the two settings at this x, below the lower one: never across the other
            other = [o["heldout"] for o in lines[not gen] if o["steps"] * o["batch"] == seen]
            above = not other or r["heldout"] >= max(other)
            ax.annotate(f"{lake} eps, {r['steps']} steps", (seen, r["heldout"]), textcoords="offset points",
                        xytext=(4, 6 if above else -11), fontsize=6.5)
    ax.set_xscale("log")
    seen = sorted({r["steps"] * r["batch"] for rs in lines.values() for r in rs})
    ax.set_xticks(seen, [f"{c:,}" for c in seen])
    ax.minorticks_off()
    ax.set_xlabel("conversations seen in training (SFT steps x batch)")
    ax.set_ylabel("held-out task success (6 tasks never trained)")
    ax.set_ylim(-0.02, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("SFT on web_form_env: held-out success against conversations seen", fontsize=10)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return png


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="the model whose runs are gathered (default smollm2)")
    ap.add_argument("--min-heldout", type=int, default=60,
                    help="held-out episodes a setting needs to be plotted (default 60: 10 per held-out task)")
    ap.add_argument("--runs", type=Path, default=RUNS, help="the folder of web_learning.py outputs")
    args = ap.parse_args()
    rows = points(args.model, args.runs)
    if not rows:
        ap.error(f"no web_learning.json of model {args.model} under {args.runs}")
    png = plot(rows, args.runs / "scaling.png", args.min_heldout)
    md = args.runs / "SCALING.md"
    md.write_text("\n".join([
        f"# The web scaling curve ({args.model})", "",
        "Gathered by `python bench/web_scaling.py` from every web_learning.json below this folder. Test: unseen seeds "
        "of the 25 trained MiniWoB tasks; held-out: the 6 tasks never trained (test_families). Means over seeds, "
        "each seed's figure in brackets; (n) = episodes evaluated; the base model's figures from the same runs.", "",
        *table(rows), "", f"Plot: {png.name} (settings with at least {args.min_heldout} held-out episodes).", ""]))
    print(md.read_text())


if __name__ == "__main__":
    main()
