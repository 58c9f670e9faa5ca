"""Test-wide settings: offline, one thread per library (2 shared cores), seeded."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


# -- attack cases: counted for the fault-injection report ----------------------------------------------------
_attacks = {"contained": 0, "breached": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    """Tally tests marked `attack` (each is one attack tried against the product; passing = contained)."""
    if "attack" not in report.keywords:
        return
    if report.when == "call":  # a skip inside the test (a kernel feature found absent) is no breach
        _attacks["skipped" if report.skipped else "contained" if report.passed else "breached"] += 1
    elif report.when == "setup" and report.skipped:
        _attacks["skipped"] += 1
    elif report.when == "setup" and report.failed:
        _attacks["breached"] += 1


def pytest_terminal_summary(terminalreporter):
    tried = _attacks["contained"] + _attacks["breached"]
    if tried or _attacks["skipped"]:
        terminalreporter.write_line(
            f"attack cases: {tried} tried, {_attacks['contained']} contained, {_attacks['breached']} breached, "
            f"{_attacks['skipped']} skipped (kernel feature absent)")
