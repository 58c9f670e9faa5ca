"""Bounded memory against gzip bombs of valid JSON (issue 11 item 4).

Before: a 255 KB gzip request inflating to 250 MiB of valid JSON took the server from 0.28 to 2.78 GB (and
was committed); a 285 KB inbox file cost the watcher 1.4 GB (the default inflated limit was 4 GiB). Now an
inflated size limit and a ratio limit (100:1 beyond the first MiB) stop the inflation early, before any JSON
is parsed. The bombs here are smaller (40 MiB inflated, ~40 KB sent) to keep the suite light; they were
accepted before and cost hundreds of MB.
"""
import gzip
import json
import os
import subprocess
import sys
import tracemalloc
import zlib

import httpx
import pytest

from edge.errors import TooLarge
from edge.guards import gunzip_bounded
from edge.options import MiB, inflate_limit
from ingest.config import ServeConfig
from lake import Lake
from tests.ingest_helpers import ServerProcess, lake_cmd

INFLATED = 40 * MiB


def json_bomb(head: bytes, tail: bytes, inflated: int = INFLATED) -> bytes:
    """gzip of `head` + "1," repeated + `tail`: valid JSON of about `inflated` bytes, built without holding it."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"1," * (1 << 19)
    out = [z.compress(head)]
    for _ in range(inflated // len(chunk)):
        out.append(z.compress(chunk))
    out.append(z.compress(b"1" + tail))
    out.append(z.flush())
    return b"".join(out)


GROUP_HEAD, GROUP_TAIL = b'{"tokens":[[', b']],"masks":[[1]],"scores":[1.0]}'
LINE_HEAD, LINE_TAIL = b'{"trajectory_id":"bomb","messages":[],"tokens":[', b"]}\n"


def _hwm_kib(pid: int) -> int:
    """Peak resident memory of a process (VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_ratio_and_cap():
    assert inflate_limit(10_000, 64 * MiB, 100) == MiB  # small bodies: the first MiB whatever the ratio
    assert inflate_limit(100_000, 64 * MiB, 100) == 10_000_000
    assert inflate_limit(10 * MiB, 64 * MiB, 100) == 64 * MiB
    assert ServeConfig().inflated_limit(255_000) == 25_500_000


@pytest.mark.attack
def test_decompressor_stops_at_the_limit():
    bomb = json_bomb(GROUP_HEAD, GROUP_TAIL)
    limit = ServeConfig().inflated_limit(len(bomb))
    assert len(bomb) < 100_000 and limit < 10 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match="limit"):
            gunzip_bounded(bomb, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit + 2 * MiB, peak
    real = gzip.compress(json.dumps({"tokens": [list(range(i, i + 500)) for i in range(300)]}).encode())
    assert json.loads(gunzip_bounded(real, ServeConfig().inflated_limit(len(real))))["tokens"][1][0] == 1


@pytest.mark.attack
def test_server_memory_stays_bounded(tmp_path):
    Lake.init(tmp_path / "lake")
    bomb = json_bomb(GROUP_HEAD, GROUP_TAIL)
    with ServerProcess(tmp_path / "lake", log_path=tmp_path / "serve.log") as srv:
        before = _hwm_kib(srv.proc.pid)
        r = httpx.post(srv.url + "/scored_data", content=bomb, timeout=60,
                       headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        grown = _hwm_kib(srv.proc.pid) - before
        assert r.status_code == 413 and "limit" in r.text, r.text
        assert grown < 100 * 1024, f"peak memory grew by {grown} KiB"
    with Lake(tmp_path / "lake").snapshot() as snap:
        assert snap.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == 0


def _watch_once_maxrss_kib(tmp_path, inbox) -> int:
    p = subprocess.Popen(lake_cmd() + ["watch", "--once", "--json", "--inbox", str(inbox), "--lake",
                                       str(tmp_path / "lake")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0
    return usage.ru_maxrss


@pytest.mark.attack
def test_watcher_memory_stays_bounded(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "ok.jsonl").write_text(json.dumps({"trajectory_id": "ok", "messages": []}) + "\n")
    base = _watch_once_maxrss_kib(tmp_path, inbox)  # the same command on a harmless file
    (inbox / "bomb.jsonl.gz").write_bytes(json_bomb(LINE_HEAD, LINE_TAIL))
    peak = _watch_once_maxrss_kib(tmp_path, inbox)
    assert (inbox / ".rejected" / "bomb.jsonl.gz").exists()
    assert "longer than" in (inbox / ".rejected" / "bomb.jsonl.gz.error.txt").read_text()
    assert peak - base < 100 * 1024, f"peak {peak} KiB against {base} KiB without the bomb"
