"""`lake train status`: where each streaming trainer stands, read from its folder and the lake, never from the
process itself (a dead watcher must still be reported).

Per watcher: its offsets and the followed tables' latest versions (the lag in versions and in rows: the rows of the
change feed after the offset, compaction excluded), its last increment, the adapters (increments) produced, and
whether it is alive: its heartbeat's process exists on this host and beat within HEARTBEAT_STALE heartbeats. The
rows each increment left out are counted by reason (its runs event's metrics), and so are those of the increments
consumed since without a new example (`skipped`: nothing was published for them).
"""
from __future__ import annotations

import math
import socket
import time
from pathlib import Path

from ground.atomic import read_json
from ground.processes import pid_alive
from lake import Lake, LakeError
from trainers.runtime import checkpoint
from trainers.watch.config import CONSUMED_FILE, HEARTBEAT_FILE, META_KEYS, WATCH_FILE, offsets_of

HEARTBEAT_STALE = 3  # heartbeat intervals without a beat: not alive


def find_watchers(runs_dir: Path) -> list[Path]:
    """Watcher folders directly under `runs_dir` (or `runs_dir` itself when it is one)."""
    runs_dir = Path(runs_dir)
    if (runs_dir / WATCH_FILE).is_file():
        return [runs_dir]
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if (p / WATCH_FILE).is_file())


def heartbeat(folder: Path) -> dict:
    path = Path(folder) / HEARTBEAT_FILE
    if not path.is_file():
        return {"alive": False, "pid": None, "phase": None, "heartbeat_age_s": None}
    try:
        hb = read_json(path)
        age = time.time() - float(hb["at"])
        pid, interval = int(hb["pid"]), float(hb.get("interval_s", 2.0))
        if pid <= 0 or not math.isfinite(age) or not math.isfinite(interval):  # kill(0 or -1, 0) asks about groups
            raise ValueError("pid, at or interval_s out of range")
    except (OSError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        # a live watcher rewrites it within HEARTBEAT_S; until then it is reported not alive, with why
        return {"alive": False, "pid": None, "phase": f"unreadable {HEARTBEAT_FILE} ({str(exc)[:80]})",
                "heartbeat_age_s": None}
    here = hb.get("host") == socket.gethostname()
    alive = (hb.get("phase") != "stopped" and age < HEARTBEAT_STALE * interval and (not here or pid_alive(pid)))
    return {"alive": alive, "pid": pid, "phase": hb.get("phase"), "heartbeat_age_s": round(age, 1)}


def skipped_since(folder: Path, increment: int) -> dict | None:
    """What the watcher consumed after increment `increment` without a new example (trainers/watch/loop.py `skip`):
    rows consumed, the rows left out by reason, the offsets; None when nothing was (or the record is stale)."""
    try:
        rec = read_json(Path(folder) / CONSUMED_FILE)
        if int(rec["checkpoint"]) != increment:
            return None
        return {"rows_consumed": int(rec["rows_consumed"]), "left_out": dict(rec["left_out"]),
                "offsets": {str(t): int(v) for t, v in rec["offsets"].items()}, "at": rec.get("at")}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # the watcher says why when it starts
        return None


def watcher_status(folder: Path, lake: Lake | None = None) -> dict:
    """The status of the watcher in `folder`; `lake` defaults to the one it follows."""
    folder = Path(folder)
    try:
        meta = read_json(folder / WATCH_FILE)
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in META_KEYS):
            raise ValueError(f"not an object with {', '.join(META_KEYS)}")
    except (OSError, ValueError) as exc:
        return {"name": folder.name, "folder": str(folder), "offsets": {}, "increments": 0, "adapters": [],
                "last_increment": None, "broken": [], **heartbeat(folder),
                "error": f"{folder / WATCH_FILE} is unreadable ({str(exc).splitlines()[0][:100]}); the watcher "
                         "rewrites it when it starts"}
    broken: list[str] = []
    try:
        usable = checkpoint.usable(folder, ("offsets", "event"), report=broken.append, validate=offsets_of)
    except checkpoint.CheckpointError as exc:
        usable, broken = None, [*broken, str(exc)]
    done = [d for d in checkpoint.complete(folder) if usable is not None and d <= usable]
    last = checkpoint.read_state(usable) if usable else None
    follow = meta.get("follow") if isinstance(meta.get("follow"), dict) else {}
    offsets = offsets_of(last) if last else {t: 0 for t in follow}
    out = {"name": meta["name"], "folder": str(folder), "recipe": meta["recipe"], "view": meta["view"],
           "model": meta["model"], "lake_root": meta["lake_root"], "offsets": offsets, "increments": len(done),
           "adapters": [str(checkpoint.weights(d)) for d in done], **heartbeat(folder),
           "broken": broken + [f"{name} (set aside)" for name in checkpoint.set_aside_found(folder)]}
    if last:
        ev = last["event"]
        m = ev["metrics"]
        out["last_increment"] = {"increment": m.get("increment"), "run_id": ev["run_id"],
                                 "rows": m.get("rows_consumed"), "steps": m.get("steps"),
                                 "final_loss": m.get("final_loss"), "adapter": ev.get("adapter_path"),
                                 "at": m.get("first_step_at"), "left_out": m.get("left_out", {}),
                                 "truncated_rows": m.get("truncated_rows", 0)}
    else:
        out["last_increment"] = None
    out["skipped"] = skipped_since(folder, int(last["event"]["metrics"].get("increment", 0)) if last else 0)
    if out["skipped"]:
        offsets = out["offsets"] = {**offsets, **out["skipped"]["offsets"]}
    try:
        lake = lake or Lake.open(meta["lake_root"])
    except LakeError as exc:
        out["error"] = str(exc)
        return out
    latest = {t: lake.version(t) for t in offsets}
    out["latest"] = latest
    out["lag_versions"] = {t: latest[t] - offsets[t] for t in offsets}
    out["lag_rows"] = {t: lake.changes(t, offsets[t]).num_rows if latest[t] > offsets[t] else 0 for t in offsets}
    out["registered_offsets"] = lake.consumers().get(meta["name"])
    return out
