"""`just up`'s supervisor (lachesis/supervisor.py, lachesis/up.py): a crashed component is reported and restarted
with a growing backoff while the others run on; Ctrl-C stops every component."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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
    while time.monotonic() - t0 < 4.5:
        sup.poll()
        time.sleep(0.05)
    crash, steady = sup.items
    assert crash.restarts == 2  # restarted after 1 s, then after 2 s: the third wait (4 s) is still running
    assert crash.last_rc == 3 and any("crash exited with code 3" in e for e in events)
    rows = {r["name"]: r for r in sup.rows()}
    assert rows["crash"]["last"] == "boom"
    assert steady.restarts == 0 and rows["steady"]["state"].startswith("running")
    assert rows["steady"]["last"] == "steady up"
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
