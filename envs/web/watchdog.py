"""The browser watchdog: a stdlib program that ends every browser of a parent process once the parent is gone.

Run as `python -I watchdog.py` in a session of its own (a signal to the parent's process group does not reach
it), with a pipe from the parent on stdin. The parent writes one line per browser it starts, `add PGID TAG`,
and `del PGID TAG` after it ended one itself. When stdin reaches end of file (the parent exited, crashed or was
killed: the kernel closes the pipe either way), the watchdog kills each remaining browser's process group and
every process whose environment carries the browser's tag (`LACHESIS_WEB_TAG=TAG`: a process that left the
group still has it), removes the tag's profile folder and exits. It imports nothing outside the stdlib so it
starts in a few milliseconds and cannot fail on the parent's environment.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time

TAG_VAR = "LACHESIS_WEB_TAG"
GONE_WAIT_S = 10.0  # how long end_browser waits for killed processes to be gone (a loaded machine is slow to reap)


def group(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of the live (not zombie) processes of a process group."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append((int(name), fields[0]))
    return found


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment holds TAG_VAR=tag (zombies have no environment left to read)."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(name))
    return found


def end_browser(pgid: int, tag: str) -> None:
    """Kill the browser's group and every process that carries its tag, twice (a fork between the two passes
    is caught by the second), wait (at most GONE_WAIT_S) until none of them is alive, then remove its profile
    folder (the tag is that folder's path)."""
    for _ in range(2):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in tagged_pids(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    # SIGKILL is not instant: a large Chromium under load takes a while to release its memory and exit, and a
    # caller that counts leftovers (or starts the next browser) right away would still see it
    deadline = time.monotonic() + GONE_WAIT_S
    while (group(pgid) or tagged_pids(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if tag.startswith("/") and os.path.basename(tag).startswith("lachesis-web-"):
        shutil.rmtree(tag, ignore_errors=True)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent must not end the watchdog first
    browsers: dict[int, str] = {}
    for line in sys.stdin:
        parts = line.split(maxsplit=2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        op, pgid, tag = parts[0], int(parts[1]), parts[2].strip()
        if op == "add":
            browsers[pgid] = tag
        elif op == "del":
            browsers.pop(pgid, None)
    for pgid, tag in browsers.items():
        end_browser(pgid, tag)


if __name__ == "__main__":
    main()
