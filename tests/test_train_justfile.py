"""The Justfile: recipes run from an activated environment too (`python` on PATH when there is no .venv), and
`just train-sft --help` shows the demo's help instead of taking --help for a lake path."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JUST = shutil.which("just", path=str(Path(sys.executable).parent)) or shutil.which("just")
pytestmark = pytest.mark.skipif(JUST is None, reason="the just binary (rust-just, a dev extra) is not installed")


def just(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([JUST, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_without_a_venv_recipes_use_python_from_path(tmp_path):
    shutil.copy(REPO / "Justfile", tmp_path / "Justfile")
    assert just("--evaluate", "py", cwd=tmp_path).stdout == "python"
    r = just("--dry-run", "demo", "--steps", "3", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip() == "python -m lachesis.demo --steps 3", r.stderr
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    assert just("--evaluate", "py", cwd=tmp_path).stdout == str(tmp_path / ".venv" / "bin" / "python")


def test_train_sft_help_is_the_help():
    r = just("--dry-run", "train-sft", "--help")
    assert r.stderr.strip().endswith("-m lachesis.demo --from-lake --help"), r.stderr
    # run for real from an "activated environment": this interpreter's folder first on PATH
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = just("train-sft", "--help", env=env)
    assert r.returncode == 0, r.stderr
    assert "--from-lake" in r.stdout and "--steps" in r.stdout and "--lake" in r.stdout


def test_just_up_passes_quoted_arguments_through():
    """Issue 37, item 3: the Justfile's own example; `{{ARGS}}` split "--min-rows 32" into two arguments of
    `just up` ("Got unexpected extra argument(s) (32)"). --dry-run prints the commands `up` would start."""
    r = just("up", "--lake", "lk", "--model", "smollm2", "--train-args", "--min-rows 32", "--serve-model-args", "--keep-versions 3",
             "--serve-model", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert set(lines) == {"serve", "watch", "train", "model"}
    train, model = shlex.split(lines["train"]), shlex.split(lines["model"])
    assert train[train.index("watch"):] == ["watch", "--lake", "lk", "--recipe", "sft",
                                            "--model", "smollm2", "--min-rows", "32"]
    assert model[-2:] == ["--keep-versions", "3"]
