"""The bench harness: what the learning benches (learning.py, online_arms.py, transfer_arms.py, reference_mix.py)
share to run the real console commands and to report over seeds.

- `Commands`: runs this environment's console scripts (`lake`, `rl_finetune_supervised`, `hermes_eval`, ...) one
  torch thread each, offline, every output kept in `<work>/logs`; with `resume`, a command that an earlier run
  finished with the same arguments and the same contents of the files it reads its setting from (--config,
  --spec: a transfer arm's lr is in its project file, not its argv) is not run again. A failing command ends the
  bench with its log's path.
- `pool(jobs, fns)`: independent runs side by side; `work_options` / `work_folder`: the --work and --resume pair.
- `time_spent`: a run's wall, CPU and command seconds, so a report says what it cost on a machine of any load.
- statistics over seeds: `ci95` (mean and 95% t-interval), `fmt_ci`, `band` (clipped to what the metric can be),
  and reading records: `by`, `first_step_at`.
Importing it puts the repository root on sys.path, so a bench run as a script (`python bench/X.py`) imports the
project's packages.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
BASH, GIT = "bash_exec_env", "git_repo_env"

# Student's t, two-sided 95%, by degrees of freedom (no scipy in the environment)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def ci95(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of the 95% t-interval over seeds); None with a single seed."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, None
    return m, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def band(values: list[float], rate: bool) -> tuple[float, float, float]:
    """(mean, low, high) of the plotted 95% band, clipped to what the metric can be: a loss or a count is never
    below 0 (a t-interval over 2 seeds easily reaches below), a rate never above 1 either."""
    m, h = ci95(values)
    lo, hi = m - (h or 0), m + (h or 0)
    return m, max(0.0, lo), min(1.0, hi) if rate else hi


def fmt_ci(values: list[float], digits: int = 3) -> str:
    m, h = ci95(values)
    return f"{m:.{digits}f}" if h is None else f"{m:.{digits}f} ± {h:.{digits}f}"


SETTING_FILES = ("--config", "--spec")  # options naming a file whose contents, not its name, carry a setting


def settings_digest(argv: list[str]) -> str:
    """'  # settings sha256:...' over the contents of the files after SETTING_FILES options ('' when none): part of
    a command's log header, so resuming reruns a command whose project file or spec changed under the same name."""
    files = [Path(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a in SETTING_FILES]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes() if f.is_file() else b"(none)")
    return f"  # settings sha256:{digest.hexdigest()[:16]}" if files else ""


class Commands:
    """Runs the console scripts of this environment, `threads` torch threads each (1: commands run side by side),
    every output kept in a log."""

    def __init__(self, work: Path, model: str, resume: bool = False, threads: int = 1):
        self.work, self.model, self.resume = work, model, resume
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "OMP_NUM_THREADS": str(threads), "LACHESIS_THREADS": str(threads),
                    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    def run(self, name: str, *args, log: str) -> str:
        argv = [str(BIN / name), *map(str, args)]
        header, done = f"$ {' '.join(argv)}{settings_digest(argv)}\n", self.logs / f"{log}.out"
        if self.resume and done.exists() and (self.logs / f"{log}.log").read_text().startswith(header):
            return done.read_text()  # finished by an earlier run with the same arguments and settings files
        if "--output" in argv:  # what a stopped earlier run left half written
            stale = Path(argv[argv.index("--output") + 1])
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        t = time.perf_counter()
        res = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True)
        (self.logs / f"{log}.log").write_text(f"{header}# {time.perf_counter() - t:.1f} s, exit "
                                              f"{res.returncode}\n{res.stdout}\n{res.stderr}")
        if res.returncode == 0:
            done.write_text(res.stdout)
        if res.returncode:
            raise SystemExit(f"{name} failed (exit {res.returncode}): {res.stderr.strip()[-600:]}\n"
                             f"log: {self.logs / log}.log")
        return res.stdout

    def evaluate(self, env: str, limit: int, adapter: Path | None, log: str, split: str = "test") -> dict:
        """hermes_eval's figures; keys prefixed `fam_` for the test_families split."""
        # a run is evaluated on its own base model (a transfer run with a fresh adapter trained over the merged
        # source, not over --model)
        extra = ["--adapter", adapter] if adapter else ["--model", self.model]
        out = json.loads(self.run("hermes_eval", "--task", env, "--split", split,
                                  "--limit", limit, "--json", "--quiet", "--no-lake", *extra, log=log))
        pre = "" if split == "test" else "fam_"
        return {f"{pre}{k}": out[key] for k, key in (
            ("success", "success_rate"), ("reward", "mean_reward"), ("valid", "valid_tool_call_rate"),
            ("first_valid", "first_call_valid_rate"), ("repetition_stops", "repetition_stops"),
            ("length_stops", "length_stops"))}

    def project_file(self, name: str, **keys) -> Path:
        """A project file written by rl_edit_config, as the guide tunes strategies 2 and 3."""
        path = self.work / f"{name}.toml"
        for k, v in keys.items():
            self.run("rl_edit_config", k, v, "--config", path, log=f"config-{name}-{k}")
        return path


def pool(jobs: int, fns: list) -> list:
    """Run independent jobs side by side (each waits on its own subprocesses); errors surface in order."""
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


def time_spent(t0: float, logs: Path) -> dict:
    """A run's wall time since `t0`, its CPU time and the commands' own times (a resumed run's earlier ones too)."""
    return {"total_s": round(time.time() - t0), "cpu_s": round(cpu_seconds()), "commands_s": round(command_seconds(logs))}


def work_options(ap: argparse.ArgumentParser) -> None:
    """--work and --resume, for a bench that runs its commands through Commands."""
    ap.add_argument("--work", type=Path, help="work folder kept for inspection (default: a temp folder, removed)")
    ap.add_argument("--resume", action="store_true",
                    help="with --work: reuse the commands an earlier run there finished with the same arguments")


def work_folder(args: argparse.Namespace, ap: argparse.ArgumentParser, prefix: str) -> Path:
    """--work, or a new temp folder (the caller removes it when --work was not given)."""
    if args.resume and not args.work:
        ap.error("--resume needs --work: the folder of the run to resume")
    work = args.work or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


def run_in_work(args: argparse.Namespace, work: Path, run) -> dict:
    """`run()` in the work folder: the folder removed afterwards unless --work named it, and each of the result's
    records' run folders given relative to it (what the saved JSON keeps)."""
    try:
        result = run()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    for r in result["records"]:  # (records taken from an earlier run's JSON are relative already)
        if Path(r["run"]).is_relative_to(work):
            r["run"] = str(Path(r["run"]).relative_to(work))
    return result


def earlier_records(path: Path, option: str, same: Callable[[dict], dict[str, tuple]],
                    keep: Callable[[dict], bool], seeds: int) -> tuple[dict, list[dict]]:
    """(the earlier bench JSON at `path`, its records that `keep` takes) for `option`, which reuses them: `same(was)`
    maps each setting that must agree to (its value there, this run's), compared as JSON (a tuple here is a list
    there); a difference, a missing file or a seed below `seeds` without records is one line (SystemExit)."""
    if not path.is_file():
        raise SystemExit(f"{option}: no earlier records at {path}")
    was = json.loads(path.read_text())
    for key, (then, now) in same(was).items():
        if then != json.loads(json.dumps(now)):
            raise SystemExit(f"{option}: {path} has {key} {then!r}, this run {now!r}")
    recs = [r for r in was["records"] if keep(r)]
    if {r["seed"] for r in recs} != set(range(seeds)):
        raise SystemExit(f"{option}: {path} lacks records of some of seeds 0..{seeds - 1}")
    return was, recs


def cpu_seconds() -> float:
    """User + system CPU of this process and every command it ran: what the run costs on a machine of any load."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


def command_seconds(logs: Path) -> float:
    """The commands' own wall times summed, from their logs (a resumed run's earlier commands included)."""
    return sum(float(m.group(1)) for f in logs.glob("*.out")
               if (m := re.match(r"[^\n]*\n# ([\d.]+) s", f.with_suffix(".log").read_text())))


def by(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


def first_step_at(records: list[dict], arm: str, seed: int, level: float) -> int | None:
    hits = [r["step"] for r in sorted(by(records, arm=arm, seed=seed), key=lambda r: r["step"])
            if r["success"] >= level]
    return hits[0] if hits else None
