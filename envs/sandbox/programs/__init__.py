"""Stand-alone programs the sandbox runs (stdlib only, never imported by the caller's code).

The checkers (state_checker.py, test_runner.py) run inside the sandbox as `python -I -S -c SOURCE`: they
get their input on stdin and print one JSON line, so nothing of the checker exists on disk where the
agent could read or edit it. The spawn helper (spawner.py) runs outside the sandbox as a script, so it
imports its sibling mountns.py, which the sandbox also imports (envs.sandbox.programs.mountns) when it forks a
command itself: one copy of the namespace and mount sequence.
"""
from importlib import resources
from pathlib import Path


def source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.py").read_text()


def path(name: str) -> str:
    """The file of a program that runs as a script (its directory is then on its import path)."""
    return str(Path(__file__).with_name(f"{name}.py"))
