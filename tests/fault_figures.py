"""Figures of the fault-injection tests, and `just faults` (`python -m tests.fault_figures`), which prints them.

A test that injects a fault (kill -9 of the server under load, of the online trainer or of a consumer; writers
racing a compactor) counts what happened and calls `record(...)` before asserting: how many things it tried
(acknowledged rows, steps, reads) and each kind of loss it looks for (lost, duplicated, repeated, skipped ...),
all of which must be 0. The attack cases (tests marked `attack`) are tallied per module by conftest.py, the
same tally that prints "attack cases: N tried, N contained" after every run, and written here too.

Nothing is written unless LACHESIS_FAULTS_OUT names a file (JSON lines), so the ordinary test run is unchanged.
`python -m tests.fault_figures [--out FAULTS.md] [pytest args]` runs the fault tests with it set, prints one line
per figure (and writes them with the date, machine, load and commit to --out; `just faults`: bench/FAULTS.md) and
exits non-zero on any loss, any breached attack, a figure that was never recorded, or a failing test.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "LACHESIS_FAULTS_OUT"
ROOT = Path(__file__).resolve().parent.parent

# test -> what it must record (a failing test records nothing before its failing assert: reported as missing)
FAULT_TESTS = {
    "tests/test_server_kill9.py": ["lake serve kill -9"],
    "tests/test_server_atropos_kill9.py": ["confirmed Atropos batches after lake serve kill -9"],
    "tests/test_lake_concurrency.py": ["snapshot reads during 2 writers + compaction",
                                       "rows after 2 writers + compaction", "consumer killed at random"],
    "tests/test_train_online.py::test_kill_9_then_resume_neither_repeats_nor_skips_a_step": ["rl_train_online kill -9"],
    "tests/test_train_watch_kill.py": ["lake train watch kill -9"],
    "tests/test_lake_s3.py": [],
    "tests/test_ray.py::test_a_rollout_worker_killed_mid_run_loses_and_duplicates_nothing": [
        "lake rollout --ray worker kill -9"],
    "tests/test_ray.py::test_a_node_removed_mid_rollout_loses_and_duplicates_nothing": [
        "lake rollout --ray node removed"],
    "tests/test_ray.py::test_a_ray_actor_killed_mid_run_is_replaced_and_every_rollout_is_consumed_once": [
        "rl_train_online --ray actor kill -9"],
    "tests/test_serve_model_faults.py": ["lake serve-model kill -9 with --record sync",
                                         "serve-model --follow fed bad increments between good ones"],
}
# parametrized fault tests: every figure of theirs is expected once per root kind
PARAMS = {"tests/test_lake_concurrency.py": ["local", "s3"]}
# attack modules by what they attack; every case asserts a clean rejection with nothing written (or containment)
ATTACKS = {
    "bad inputs": ["test_server_badinput", "test_cli_badinput", "test_watch_attacks", "test_memory_bounds",
                   "test_server_browser", "test_idempotency_attacks", "test_lake_locks", "test_import_attacks",
                   "test_server_hardening", "test_server_limits"],
    "sandbox escapes": ["test_sandbox_escape", "test_sandbox_limits"],
    "grader attacks": ["test_grader_integrity"],
    "checkpoint and row attacks": ["test_checkpoint_attacks", "test_train_row_bound"],
    "model server and export attacks": ["test_serve_model_limits", "test_serve_model_badinput",
                                        "test_serve_model_chat_bounds", "test_serve_model_cancel",
                                        "test_serve_model_options", "test_serve_model_record_fail",
                                        "test_serve_model_follow_bad", "test_serve_model_identity",
                                        "test_export_model_attacks"],
}


def record(figure: str, *, tried: int, unit: str, **faults: int) -> None:
    """One figure of a fault test: `tried` things of `unit`, and counts of each loss (all must be 0)."""
    path = os.environ.get(ENV)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    line = json.dumps({"figure": figure, "test": test, "tried": tried, "unit": unit, "faults": faults})
    with open(path, "a") as f:  # one short O_APPEND write per figure: whole lines even from several processes
        f.write(line + "\n")


def record_attacks(per_module: dict[str, dict[str, int]]) -> None:
    """The attack tally of a test session, per module (contained / breached / skipped)."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a") as f:
        for module, counts in sorted(per_module.items()):
            f.write(json.dumps({"attacks": module, **counts}) + "\n")


# ----------------------------------------------------------------------------------------------- the report
def read(path: Path) -> tuple[list[dict], dict[str, dict[str, int]]]:
    figures, attacks = [], {}
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if "attacks" in rec:
            a = attacks.setdefault(rec.pop("attacks"), {"contained": 0, "breached": 0, "skipped": 0})
            for k in a:
                a[k] += rec.get(k, 0)
        else:
            figures.append(rec)
    return figures, attacks


def figure_line(rec: dict) -> str:
    param = rec["test"].partition("[")[2].rstrip("]")
    losses = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in rec["faults"].items())
    return f"{rec['figure']}{f' [{param}]' if param else ''}: {rec['tried']} {rec['unit']}; {losses}"


def attack_lines(attacks: dict[str, dict[str, int]]) -> list[str]:
    lines = []
    for category, modules in ATTACKS.items():
        got = {m: attacks[m] for m in modules if m in attacks}
        if not got:
            continue
        c = sum(a["contained"] for a in got.values())
        b = sum(a["breached"] for a in got.values())
        s = sum(a["skipped"] for a in got.values())
        parts = ", ".join(f"{m.removeprefix('test_')} {a['contained'] + a['breached']}" for m, a in got.items())
        verb = "rejected cleanly, nothing written" if category == "bad inputs" else "contained"
        lines.append(f"{category}: {c + b} tried, {c} {verb}, {b} breached"
                     f"{f', {s} skipped (kernel feature absent)' if s else ''} ({parts})")
    return lines


def _matches(rec: dict, expected: str) -> bool:
    """`expected` is a figure's leading words, optionally with the test parameter it must come from: 'name [s3]'."""
    name, _, param = expected.partition(" [")
    return rec["figure"].startswith(name) and (not param or rec["test"].endswith(f"[{param}"))


def summarize(figures: list[dict], attacks: dict, expected: list[str]) -> tuple[list[str], bool]:
    """The printed lines and whether everything held: no loss, no breach, every expected figure recorded."""
    lines = [figure_line(r) for r in figures] + attack_lines(attacks)
    ok = all(v == 0 for r in figures for v in r["faults"].values())
    ok &= all(a["breached"] == 0 for a in attacks.values())
    missing = [e for e in expected if not any(_matches(r, e) for r in figures)]
    lines += [f"{e}: NOT RECORDED (its test failed or did not run)" for e in missing]
    return lines, ok and not missing


def write_report(path: Path, lines: list[str], load0: float) -> None:
    """The printed figures as a committed file: when, where, under what load and at which commit they held."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    made = (f"Generated by `just faults` (`python -m tests.fault_figures`) on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}; {os.cpu_count()} cores, "
            f"{platform.system()} {platform.release().split('-')[0]}; 1-minute load {load0:.2f} at the start, "
            f"{os.getloadavg()[0]:.2f} at the end.")
    path.write_text("# Fault injection\n\n" + made + "\n\n```\n" + "\n".join(lines) + "\n```\n")


def main(argv: list[str]) -> int:
    report = None
    if argv[:1] == ["--out"]:
        report, argv = Path(argv[1]), argv[2:]
    load0 = os.getloadavg()[0]
    # every listed file runs: a renamed or missing one is a pytest error, so a failing exit, never a silent skip
    tests = [*FAULT_TESTS, *(f"tests/{m}.py" for ms in ATTACKS.values() for m in ms)]
    expected = [f"{e} [{p}]" if t in PARAMS else e for t in tests for e in FAULT_TESTS.get(t, [])
                for p in PARAMS.get(t, [""])]
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        out = Path(tmp) / "figures.jsonl"
        env = {**os.environ, ENV: str(out), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        # fault tests too long for the default suite are marked slow and fault: they run here
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                               "not slow or fault", *tests, *argv],
                              cwd=ROOT, env=env).returncode
        figures, attacks = read(out)
    lines, ok = summarize(figures, attacks, expected)
    lines += [f"pytest exited with {code}: a fault test failed"] if code else []
    lines += ["result: " + ("no loss" if ok and not code else "LOSS OR FAILURE (see above)")]
    print("\nfault injection:")
    for line in lines:
        print("  " + line)
    if report:
        write_report(report, lines, load0)
    return 0 if ok and not code else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
