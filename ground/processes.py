"""Whether a process is there: the one check every wing uses (stale lock and cache owners, a server's pid)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user counts: it is alive, we may not signal it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
