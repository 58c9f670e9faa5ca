"""The ground's generic helpers that no wing's test reaches directly: stopping children (TERM, a wait, KILL) and the
range checks of config fields, whose messages every wing's options show."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ground.errors import UserError
from ground.processes import pid_alive, stop
from ground.ranges import at_least, positive

IGNORES_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                "time.sleep(60)")


def _child(code: str, **kw) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kw)
    assert p.stdout.readline().strip() == "ready"  # its handler is in place before it is stopped
    return p


@pytest.mark.parametrize("group", [False, True])
def test_stop_terms_then_kills_only_what_is_still_running(group):
    polite = _child("import time; print('ready', flush=True); time.sleep(60)", start_new_session=group)
    stubborn = _child(IGNORES_TERM, start_new_session=group)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    t0 = time.monotonic()
    killed = stop([polite, done, stubborn], 1.0, group=group)
    assert killed == [stubborn] and time.monotonic() - t0 < 30
    assert polite.returncode == -15 and stubborn.returncode == -9 and not pid_alive(stubborn.pid)


def test_stop_without_term_waits_then_kills():
    child = _child("import time; print('ready', flush=True); time.sleep(60)")
    assert stop([child], 0.2, term=False) == [child] and child.returncode == -9
    assert pid_alive(os.getpid())


class CfgError(UserError):
    pass


def test_range_checks_name_the_option_or_the_key_in_the_callers_error():
    cfg = type("Cfg", (), {"max_steps": 0, "lr": 0.0, "unset": None, "ratio": 0.25})()
    with pytest.raises(CfgError, match=r"^--max-steps must be at least 1, got 0$"):
        at_least(cfg, 1, "unset", "max_steps", error=CfgError)
    with pytest.raises(UserError, match=r"^max_steps must be at least 1, got 0$"):
        at_least(cfg, 1, "max_steps", option=False)
    with pytest.raises(CfgError, match=r"^--ratio must be at least 0.5, got 0.25$"):
        at_least(cfg, 0.5, "ratio", error=CfgError)
    with pytest.raises(CfgError, match=r"^lr must be positive, got 0.0$"):
        positive(cfg, "ratio", "lr", error=CfgError, option=False)
    cfg.lr = float("nan")
    with pytest.raises(CfgError, match="must be positive, got nan"):
        positive(cfg, "lr", error=CfgError)
    at_least(cfg, 0, "max_steps", "unset")  # in range, or unset: nothing raised
