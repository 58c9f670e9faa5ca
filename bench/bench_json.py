"""One JSON file per benchmark run (`--json-out PATH`): the bench's own results plus when, where and under what
load they were measured, so bench/report.py can put every figure in one table with its date, machine and load
without anyone copying numbers by hand."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

LOAD_AT_START = os.getloadavg()[0]  # benches import this module first thing: the load when the run began


def machine() -> str:
    """Cores, CPU model and OS of this machine, e.g. '2 cores, AMD EPYC 7B13, Linux 6.1'."""
    cpu = platform.processor() or "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release().split('-')[0]}"


def write(path: str | Path, bench: str, results) -> Path:
    """Write `results` (whatever the bench measured) wrapped with its metadata: the 1-minute load average when
    the bench imported this module and now, at the end of the run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    meta = {"bench": bench, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
            "load_avg_1m": [round(LOAD_AT_START, 2), round(load, 2)]}
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str) + "\n")
    return path
