"""Does a command reference in the SFT mix carry commands over to task families never trained on?

bench/knowledge_probe.py found that SmolLM2-135M-Instruct knows almost no shell (1 of 80 tasks in plain chat), so
the held-out families (test_families) need commands that no training row shows. Issue 24 allows tasks built from
public, permissively licensed command references from the package registries; the one found there is `eg` (PyPI,
MIT, Sam Sudar: 75 markdown pages of described examples, e.g. "unstage changes to foo.py that have been added:
`git reset path/to/foo.py`", "Rename or move (`-m`) the current branch: `git branch -m newname`"). Each described
example becomes one SFT chat in the environment's own format (system prompt and tools of git_repo_env for git's
page, bash_exec_env's for the rest; the description as the user's turn; a `run` call of the command as the
answer). Two arms, the same seeds and steps:

    expert                 the sft view of 600 bash and 300 git expert rollouts (train split)
    expert+reference       the same rows and the ~660 reference chats, shuffled together, the same steps (so
                           each step holds fewer expert rows)
    expert+reference-long  the same mix, steps scaled by mix/expert rows: as many expert rows as `expert` sees

scored by hermes_eval on both environments' held-out families and test splits. The reference is read from the
installed `eg` package (`pip install eg`; its pages are data, none of its code runs) and never committed here.

    python bench/reference_mix.py                 # SmolLM2, 2 seeds, 64 and 111 steps: ~100 min on 2 CPU cores
    python bench/reference_mix.py --quick         # tiny model, 2 steps, 4 tasks: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bench_json import machine
from harness import BASH, GIT, ROOT, Commands, fmt_ci, pool

SHELL_PROMPT = "$ "  # a line of an eg session block that is a command (the rest is its output)


@dataclass(frozen=True)
class Size:
    bash_rollouts: int
    git_rollouts: int
    steps: int
    tasks: int  # per split
    seeds: tuple[int, ...]


FULL = Size(600, 300, 64, 40, (0, 1))
QUICK = Size(16, 16, 2, 4, (0,))
SPLITS = ((BASH, "test_families"), (GIT, "test_families"), (BASH, "test"), (GIT, "test"))


def reference_pages() -> dict[str, str]:
    """eg's pages, {command: markdown}; a one-line error when the package is not installed."""
    try:
        folder = resources.files("eg") / "examples"
    except ModuleNotFoundError:
        raise SystemExit("the command reference is the `eg` package: pip install eg (MIT; its examples/ pages)") from None
    return {p.name.removesuffix(".md"): p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.endswith(".md")}


def examples(page: str) -> list[tuple[str, str]]:
    """(description, command) pairs of one eg page: a prose paragraph followed by an indented block. A block with
    `$ ` lines is a session (those lines are commands, the rest output); without, its first line is the command."""
    out, prose = [], None
    for para in re.split(r"\n\s*\n", page):
        lines = para.split("\n")
        if all(x.startswith("    ") or not x.strip() for x in lines):
            block = [x[4:] for x in lines if x.strip()]
            cmds = [x[2:] for x in block if x.startswith(SHELL_PROMPT)] or block
            if prose and cmds:
                out.append((" ".join(x.strip() for x in prose.split("\n")).rstrip(":").strip(), cmds[0].strip()))
            prose = None
        else:
            prose = None if para.lstrip().startswith("#") else para.strip()
    return out


def reference_chats() -> list[dict]:
    """Every described example as an SFT row in its environment's format."""
    import envs

    fmt = {}
    for name in (BASH, GIT):  # the class's prompt and tools: no task, so no sandbox to build
        env = envs.make(name).unwrapped
        fmt[name] = (env.system_prompt, env.tools)
    rows = []
    for command, page in sorted(reference_pages().items()):
        system, tools = fmt[GIT if command == "git" else BASH]
        for desc, cmd in examples(page):
            call = {"id": "call_0_0", "type": "function",
                    "function": {"name": "run", "arguments": json.dumps({"command": cmd}, separators=(",", ":"))}}
            rows.append({"messages": [{"role": "system", "content": system}, {"role": "user", "content": desc},
                                      {"role": "assistant", "content": "", "tool_calls": [call]}],
                         "tools": tools, "split": "train"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def datasets(c: Commands, size: Size) -> dict:
    """The two training files by name, and `counts`: (expert chats, reference chats)."""
    lake = c.work / "lake"
    c.run("lake", "init", "--lake", lake, log="init")
    for env, n in ((BASH, size.bash_rollouts), (GIT, size.git_rollouts)):
        c.run("lake", "rollout", "--env", env, "--policy", "expert", "--episodes", n, "--lake", lake, log=f"rollout-{env}")
    c.run("lake", "export", "sft", "--lake", lake, "--output", c.work / "sft", "--format", "jsonl", log="export")
    expert = [json.loads(x) for p in sorted((c.work / "sft").glob("*.jsonl")) for x in p.read_text().splitlines()]
    expert = [{"messages": r["messages"], "tools": json.loads(r["tools"]) if isinstance(r["tools"], str) else r["tools"],
               "split": "train"} for r in expert if r.get("split") == "train"]
    ref = reference_chats()
    mix = expert + ref
    random.Random(0).shuffle(mix)
    return {"expert": write_jsonl(c.work / "expert.jsonl", expert),
            "expert+reference": write_jsonl(c.work / "mix.jsonl", mix), "counts": (len(expert), len(ref))}


ARMS = ("expert", "expert+reference", "expert+reference-long")


def arm_steps(size: Size, data: dict, arm: str) -> int:
    n_expert, n_ref = data["counts"]
    return round(size.steps * (n_expert + n_ref) / n_expert) if arm.endswith("-long") else size.steps


def arm_run(c: Commands, size: Size, data: dict, arm: str, seed: int) -> dict:
    tag = f"{arm.replace('+', '_')}-s{seed}"
    run = c.work / f"run-{tag}"
    path = data["expert" if arm == "expert" else "expert+reference"]
    steps = arm_steps(size, data, arm)
    c.run("rl_finetune_supervised", "--model", c.model, "--data", path, "--max-steps", steps, "--learning-rate", 2e-3,
          "--batch-size", 2, "--grad-accum", 4, "--seed", seed, "--output", run, "--no-plot", "--quiet", "--no-lake",
          log=f"sft-{tag}")
    rec = {"arm": arm, "seed": seed, "steps": steps}
    for env, split in SPLITS:
        got = c.evaluate(env, size.tasks, run, log=f"eval-{tag}-{env}-{split}", split=split)
        rec.update({f"{env}:{k}": v for k, v in got.items()})
    return rec


def table(records: list[dict], arms: list[str]) -> list[str]:
    keys = [(f"{env}:{'fam_' if split == 'test_families' else ''}{m}", f"{env.split('_')[0]} {split} {label}")
            for env, split in SPLITS for m, label in (("success", "success"), ("first_valid", "valid first call"))]
    others = [a for a in arms if a != "expert"]
    steps = {r["arm"]: r["steps"] for r in records}
    out = ["| measure | " + " | ".join(f"{a} ({steps[a]} steps)" for a in arms) + " | "
           + " | ".join(f"{a} minus expert, same seeds" for a in others) + " |",
           "|---" * (1 + len(arms) + len(others)) + "|"]
    for key, label in keys:
        cells = [fmt_ci([r[key] for r in records if r["arm"] == a]) for a in arms]
        for o in others:
            diff = [b[key] - a[key] for a in records if a["arm"] == "expert"
                    for b in records if b["arm"] == o and b["seed"] == a["seed"]]
            cells.append(fmt_ci(diff) if diff else "")
        out.append(f"| {label} | {' | '.join(cells)} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="tiny | smollm2 | a model folder")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 steps, 4 tasks: checks that it runs")
    ap.add_argument("--seeds", type=int, nargs="+", help="seeds (default 0 1)")
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="arms to run (default all)")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side, one torch thread each")
    ap.add_argument("--out", type=Path, help="where the table goes (default bench/reference_mix/<model>)")
    ap.add_argument("--work", type=Path, help="work folder kept for inspection and --resume (default: a temp folder)")
    ap.add_argument("--resume", action="store_true", help="with --work: skip the commands an earlier run finished")
    a = ap.parse_args()
    size = QUICK if a.quick else FULL
    model = "tiny" if a.quick else a.model
    if a.seeds:
        size = Size(size.bash_rollouts, size.git_rollouts, size.steps, size.tasks, tuple(a.seeds))
    work = a.work or Path(tempfile.mkdtemp(prefix="reference_mix-"))
    work.mkdir(parents=True, exist_ok=True)
    c = Commands(work, model, resume=a.resume)
    t0 = time.perf_counter()
    data = datasets(c, size)
    arms = [x for x in ARMS if x in a.arms]
    jobs = [lambda arm=arm, seed=seed: arm_run(c, size, data, arm, seed) for seed in size.seeds for arm in arms]
    records = pool(a.jobs, jobs)
    lines = table(records, arms)
    minutes = (time.perf_counter() - t0) / 60
    n_expert, n_ref = data["counts"]
    head = (f"`python bench/reference_mix.py{' --quick' if a.quick else ''}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"{machine()}; {minutes:.0f} min. Model {model}, SFT steps of 8 (lr 2e-3), seeds "
            f"{', '.join(map(str, size.seeds))}; {n_expert} expert chats, {n_ref} reference chats (eg); the first "
            f"{size.tasks} tasks of each split.")
    print(head + "\n\n" + "\n".join(lines))
    out = a.out or ROOT / "bench" / "reference_mix" / ("quick" if a.quick else Path(model).name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "REFERENCE.md").write_text(head + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    (out / "records.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    print(f"wrote {out / 'REFERENCE.md'} (mean {statistics.fmean(r[f'{GIT}:fam_success'] for r in records):.3f} "
          f"git held-out success)")


if __name__ == "__main__":
    main()
