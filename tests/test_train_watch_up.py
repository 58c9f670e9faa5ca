"""`just up`'s supervisor (lachesis/supervisor.py, lachesis/up.py): a crashed component is reported and restarted
with a growing backoff while the others run on; Ctrl-C stops every component."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from lachesis.supervisor import Component, Supervisor

REPO = Path(__file__).resolve().parent.parent


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_crashed_component_is_restarted_with_backoff_and_stop_ends_the_rest(tmp_path):
    events: list[str] = []
    sup = Supervisor([Component("crash", py("print('boom', flush=True); raise SystemExit(3)")),
                      Component("steady", py("import time; print('steady up', flush=True); time.sleep(120)"))],
                     tmp_path / "logs", on_event=events.append, stop_timeout=5)
    sup.start()
    t0 = time.monotonic()
    crash, steady = sup.items
    # until the third crash is seen (a busy machine starts Python slowly: no fixed window)
    while not (crash.failures == 3 and crash.state == "backoff") and time.monotonic() - t0 < 60:
        sup.poll()
        time.sleep(0.05)
    assert crash.restarts == 2 and crash.state == "backoff"  # restarted twice, the third wait under way
    assert time.monotonic() - t0 >= 3.0  # after waits of 1 s and 2 s
    assert crash.next_start > time.monotonic()  # the third wait (4 s) has not ended yet
    assert crash.last_rc == 3 and any("crash exited with code 3" in e for e in events)
    rows = {r["name"]: r for r in sup.rows()}
    assert rows["crash"]["last"] == "boom"
    assert steady.restarts == 0 and rows["steady"]["state"].startswith("running")
    assert rows["steady"]["last"] == "steady up"
    # each start of a component is marked in its log (a restart appends to the same file)
    marks = [ln for ln in crash.log.read_text().splitlines() if ln.startswith("=== ")]
    assert len(marks) == 3 and all(" lake up: crash starts: " in m for m in marks)
    assert crash.log.read_text().splitlines()[-1] == "boom"
    t1 = time.monotonic()
    sup.stop()
    assert steady.proc.returncode == -signal.SIGTERM and time.monotonic() - t1 < 5


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_starts_the_three_components_and_ctrl_c_stops_them_all(tmp_path):
    up = subprocess.Popen([sys.executable, "-m", "lachesis.up", "--lake", str(tmp_path / "lake"), "--port",
                           str(_free_port()), "--skills", str(tmp_path / "skills"), "--inbox", str(tmp_path / "inbox"),
                           "--logs", str(tmp_path / "logs")], cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 30
        children: list[int] = []
        while time.monotonic() < deadline and len(children) < 3:
            time.sleep(0.2)
            children = _children(up.pid)
        assert len(children) == 3, "serve, watch and train were not all started"
        assert (tmp_path / "lake" / "_lachesis").is_dir()
        up.send_signal(signal.SIGINT)
        _, err = up.communicate(timeout=40)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, err[-2000:]
    assert "stopped" in err
    alive = [p for p in children if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]]
    assert not alive, f"components still running after Ctrl-C: {alive}"
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {"serve.log", "watch.log", "train.log"}


def test_a_usage_error_stops_everything_with_its_message_instead_of_restarts(tmp_path):
    """Issue 37, item 3: exit code 2 (a bad option, a refused folder) is not cured by a restart."""
    events: list[str] = []
    sup = Supervisor([Component("steady", py("import time; print('steady up', flush=True); time.sleep(120)")),
                      Component("bad", py("import sys; print('error: --min-rows must be at least 1, got 0', "
                                          "file=sys.stderr, flush=True); raise SystemExit(2)"))],
                     tmp_path / "logs", on_event=events.append, stop_timeout=5)
    t0 = time.monotonic()
    sup.run(threading.Event(), lambda rows: None, interval=0.05)  # returns by itself: no stop was asked for
    assert time.monotonic() - t0 < 10
    steady, bad = sup.items
    assert bad.restarts == 0 and bad.state == "failed" and bad.last_rc == 2
    assert sup.failed.startswith("bad stopped with a usage error: error: --min-rows must be at least 1, got 0")
    assert events == [sup.failed]
    assert steady.proc.returncode == -signal.SIGTERM and steady.state == "stopped"


def test_up_stops_with_the_trainers_usage_error(tmp_path):
    """The same through `python -m lachesis.up`: the trainer refuses its --train-args, `up` exits 2 with its line."""
    up = subprocess.run([sys.executable, "-m", "lachesis.up", "--lake", str(tmp_path / "lake"), "--port",
                         str(_free_port()), "--skills", str(tmp_path / "skills"), "--inbox", str(tmp_path / "inbox"),
                         "--logs", str(tmp_path / "logs"), "--train-args", "--min-rows 0"], cwd=str(REPO),
                        capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert up.returncode == 2, up.stderr[-2000:]
    assert "train stopped with a usage error: error: --min-rows must be at least 1, got 0" in up.stderr
    assert "restarted" not in up.stderr
