"""Stand-alone programs the sandbox runs with `python -I -S -c SOURCE` (read as text, never imported).

They use the stdlib only, get their input on stdin and print one JSON line, so nothing of the checker
exists on disk where the agent could read or edit it.
"""
from importlib import resources


def source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.py").read_text()
