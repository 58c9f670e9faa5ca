"""The Justfile as `just --list` shows it, and Ctrl-C under `just` (issue 27 item 10): each recipe's description is
one complete line (just shows only the comment line right above a recipe: two-line comments showed their second
half, cut mid-sentence), and a command that stops cleanly on Ctrl-C makes `just` exit 0 (`just up` ended with
"recipe `up` was terminated on line 49 by signal 2")."""
from __future__ import annotations

import os
import pty
import re
import select
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JUST = shutil.which("just", path=str(Path(sys.executable).parent)) or shutil.which("just")
pytestmark = pytest.mark.skipif(JUST is None, reason="the just binary (rust-just, a dev extra) is not installed")
RECIPE = re.compile(r"^(@?[a-z][\w-]*)(\s[^:=]*)?:(\s|$)")


def test_every_recipe_has_one_complete_line_of_description():
    lines = (REPO / "Justfile").read_text().splitlines()
    for i, line in enumerate(lines):
        m = RECIPE.match(line)
        if not m or ":=" in line:
            continue
        above = []
        j = i - 1
        while j >= 0 and (lines[j].startswith("#") or lines[j].startswith("[")):
            above.append(lines[j])
            j -= 1
        comments = [x for x in above if x.startswith("#")]
        assert len(comments) == 1, f"recipe {m.group(1)}: {len(comments)} comment lines right above it; `just --list` " \
                                   "shows only the last: one line, longer notes above a blank line"
        doc = comments[0].lstrip("# ")
        # a sentence: a capital or a command as its subject ("lake serve-model: ..."), a full stop at the end
        whole = (doc[:1].isupper() or re.match(r"^[\w -]+: ", doc)) and doc.endswith(".")
        assert whole, f"recipe {m.group(1)}: {doc!r} is not a whole sentence"


def _under_a_terminal(argv: list[str], cwd: Path, ready: str, wait_s: float) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as its controlling terminal, press Ctrl-C once `ready` is printed (or after
    wait_s), return (exit code, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a new session whose terminal is the pty, as in a terminal window
        os.chdir(cwd)
        os.execv(argv[0], argv)
    out, t0 = b"", time.monotonic()
    while time.monotonic() - t0 < wait_s and ready.encode() not in out:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to its foreground process group
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


WAIT_FOR_CTRL_C = ("import signal, sys, threading; stop = threading.Event(); "
                   "signal.signal(signal.SIGINT, lambda *a: stop.set()); print('ready', flush=True); stop.wait(30); "
                   "sys.exit(0 if stop.is_set() else 3)")


def test_a_command_that_stops_cleanly_on_ctrl_c_makes_just_exit_0(tmp_path):
    code = f"from lachesis.foreground import terminal_foreground\nwith terminal_foreground():\n    exec({WAIT_FOR_CTRL_C!r})"
    (tmp_path / "stop.py").write_text(code)
    # in just's group both get the SIGINT: the command lingers a second after it, so just has surely seen its own
    # before the command exits (an instant exit 0 raced just's handler on a busy machine: just then exited 0)
    (tmp_path / "plain.py").write_text(WAIT_FOR_CTRL_C.replace("sys.exit(", "import time; time.sleep(1); sys.exit("))
    (tmp_path / "justfile").write_text(f"export PYTHONPATH := {str(REPO)!r}\n\n# Wait for Ctrl-C in the foreground.\n"
                                       f"fg:\n    exec {sys.executable} stop.py\n\n# Wait for Ctrl-C in just's group.\n"
                                       f"plain:\n    exec {sys.executable} plain.py\n")
    code, out = _under_a_terminal([JUST, "fg"], tmp_path, "ready", 20)
    assert code == 0, out
    code, out = _under_a_terminal([JUST, "plain"], tmp_path, "ready", 20)  # the same command in just's group
    assert code == 130 and "interrupted by SIGINT" in out, out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_just_up_stopped_with_ctrl_c_exits_0(tmp_path):
    argv = [JUST, "--justfile", str(REPO / "Justfile"), "--working-directory", str(tmp_path), "up", "--lake", "lk",
            "--skills", "sk", "--inbox", "ib", "--port", str(free_port()), "--logs", "logs"]
    code, out = _under_a_terminal(argv, tmp_path, "train  running", 90)
    assert code == 0, out[-2000:]
    assert "stopped" in out and "terminated" not in out and "interrupted" not in out
