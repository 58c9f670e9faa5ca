"""The README quick start (issue 27 item 1): setup says what to run next and how to get the commands on PATH, and the
main job it runs is the pretrained model's demo (SmolLM2, LoRA), the tiny model one option away."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _quick_start() -> str:
    return README.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_setup_prints_the_next_step_and_how_to_get_the_commands(tmp_path):
    """bootstrap.sh on an installed .venv (its stamp current: nothing to install) ends by naming the next command."""
    for name in ("pyproject.toml", "constraints.txt", "scripts/bootstrap.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tmp_path / ".venv" / "bin" / "python")
    stamp = hashlib.sha256(b"".join((tmp_path / n).read_bytes()
                                    for n in ("pyproject.toml", "constraints.txt", "scripts/bootstrap.sh"))).hexdigest()
    (tmp_path / ".venv" / ".lachesis-installed").write_text(stamp + "\n")
    r = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "installing" not in r.stdout  # the stamp matched: the test installed nothing
    assert ".venv/bin/just demo" in r.stdout and ".venv/bin/just test" in r.stdout
    assert "source .venv/bin/activate" in r.stdout and ".venv/bin/lake" in r.stdout


def test_the_quick_start_runs_the_smollm2_demo_and_says_how_to_get_the_commands():
    from lachesis.demo import DemoConfig

    qs = _quick_start()
    assert "bash scripts/bootstrap.sh demo" in qs and ".venv/bin/just test" in qs
    assert "source .venv/bin/activate" in qs  # the commands on PATH
    assert DemoConfig().model == "smollm2" and DemoConfig().size == "pretrained"
    assert "--model tiny" in qs  # the tiny model stays one option away
    just = (ROOT / "Justfile").read_text()
    assert re.search(r"^demo \*ARGS:\n\s+\{\{py\}\} -m lachesis\.demo \{\{ARGS\}\}$", just, re.M)


def test_the_quick_start_table_gives_date_load_and_both_commands_times():
    """The figures of both quick-start commands are measured ones, each with a date and the machine's load, on the
    results page (dated figures live in docs/, not in the README, which links them)."""
    assert "docs/results.md" in _quick_start()
    qs = (ROOT / "docs" / "results.md").read_text().split("## The quick start, timed", 1)[1].split("\n## ", 1)[0]
    for command in ("bash scripts/bootstrap.sh demo", ".venv/bin/just test"):
        row = next((x for x in qs.splitlines() if x.startswith("|") and command in x), None)
        assert row, f"no measured row for {command!r} in the quick start"
        assert re.search(r"20\d\d-\d\d-\d\d", row) and "load" in row and re.search(r"\d+ min", row), row
