"""Test-wide settings: offline, one thread per library (2 shared cores), seeded."""
import os

from tests.fault_figures import record_attacks

# the S3 emulator's fixtures (s3_emulator, any_lake_root: a local or an s3:// root) for every test module
pytest_plugins = ["tests.s3_emulator"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LACHESIS_THREADS", "1")  # the model server's default is every CPU: one here
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# pytest-xdist's workers inherit COLUMNS=80, and Rich fixes a console's width when COLUMNS is set as it is built
# (lachesis.console's at import): drop it so each CLI test's own COLUMNS decides, as in one process.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


# -- attack cases: counted for the fault-injection report ----------------------------------------------------
_attacks = {"contained": 0, "breached": 0, "skipped": 0}
_by_module: dict[str, dict[str, int]] = {}  # the same per test module, for `just faults` (tests/fault_figures.py)


def _tally(report, outcome: str) -> None:
    _attacks[outcome] += 1
    module = report.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
    _by_module.setdefault(module, {"contained": 0, "breached": 0, "skipped": 0})[outcome] += 1


def pytest_runtest_logreport(report):
    """Tally tests marked `attack` (each is one attack tried against the product; passing = contained)."""
    if "attack" not in report.keywords:
        return
    if report.when == "call":  # a skip inside the test (a kernel feature found absent) is no breach
        _tally(report, "skipped" if report.skipped else "contained" if report.passed else "breached")
    elif report.when == "setup" and report.skipped:
        _tally(report, "skipped")
    elif report.when == "setup" and report.failed:
        _tally(report, "breached")


def pytest_terminal_summary(terminalreporter):
    record_attacks(_by_module)  # written only when LACHESIS_FAULTS_OUT is set
    tried = _attacks["contained"] + _attacks["breached"]
    if tried or _attacks["skipped"]:
        terminalreporter.write_line(
            f"attack cases: {tried} tried, {_attacks['contained']} contained, {_attacks['breached']} breached, "
            f"{_attacks['skipped']} skipped (kernel feature absent)")
