"""What the web environment's test modules share: the skip mark without a browser, and the check that ends each
module (last in it: the module runs in one worker with --dist loadfile) that no browser it started is left."""
from __future__ import annotations

import time

import pytest

from envs.web import browser as browsers

MISSING = browsers.missing()
needs_browser = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def assert_no_browser_left() -> None:
    """End the process-wide pool, then no process of any browser this process started may be alive (5 s grace)."""
    assert browsers.STARTED
    browsers.pool().shutdown()
    deadline = time.time() + 5
    while time.time() < deadline and browsers.leftovers():
        time.sleep(0.1)
    assert browsers.leftovers() == []
