"""Dedupe keys that hold across processes: a table's ids, checked against the lake at commit time.

Each ingest process (`lake serve`, `lake watch`, `lake import`) keeps the keys of what is in the lake in
memory (trajectory ids; `Idempotency-Key`s of rewards and skills) and skips what it already knows before it
commits. That check alone is per process: two servers on one lake, or the watcher and an import of the same
file, each pass it and each store the rows. So the same index is also the table's `lake.locks.CommitGuard`:
the lake calls it under the table's cross-process commit lock with the latest version, it first reads the
keys of the versions other processes committed since it last looked (only the key column of the files
those versions added), then drops the rows whose key is known. What it dropped is counted in the
`AppendResult` (`skipped`) and its keys kept in `dropped`, so a request can tell its client the truth.

A key also stands for one body: keyed rows carry `metadata.idempotency_body` (sha256), and a request found to
be a duplicate is compared with it (`BodyHashes`): the same key with another body is a 409, not a `duplicate`
that drops the new body (before: `/scored_data_list` answered "2 groups" and stored 1).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import orjson
import pyarrow as pa
from deltalake import DeltaTable

from edge.errors import BadInput
from ingest.records import trajectory_ids
from lake import Lake, delta, store
from lake.query import ident

KeyFn = Callable[[pa.Table], list]
MAX_DROPPED = 1 << 16
MAX_BODY_HASHES = 1 << 16  # ~10 MB of cache; older keys are looked up in the lake


def trajectory_keys(t: pa.Table) -> list:
    return t.column("trajectory_id").to_pylist()


def idempotency_keys(table: str) -> KeyFn:
    """Keys `<table>:<Idempotency-Key>` from the rows' metadata (None for rows written without a key)."""

    def keys(t: pa.Table) -> list:
        out = []
        for m in t.column("metadata").to_pylist():
            meta = orjson.loads(m) if m else None
            k = meta.get("idempotency_key") if isinstance(meta, dict) else None
            out.append(f"{table}:{k}" if isinstance(k, str) else None)
        return out

    return keys


class KeyGuard:
    """The keys of one table as of `version`; a CommitGuard that admits only rows with new keys."""

    def __init__(self, lake: Lake, table: str, key_fn: KeyFn, column: str, keys: set, version: int):
        self.path = lake.table_path(table)
        self._open = lambda: lake.delta_table(table)
        self.key_fn, self.column = key_fn, column
        self.keys, self.version = keys, version
        self.dropped: dict = {}  # keys refused at commit time, oldest first (a request pops its own)
        self._mutex = threading.Lock()  # admit/committed run in the lake's commit threads

    def admit(self, dt: DeltaTable, payloads: list[pa.Table]) -> list[pa.Array | None]:
        with self._mutex:
            self._catch_up(dt)
            masks, taken = [], set()
            for p in payloads:
                mask = []
                for k in self.key_fn(p):
                    ok = k is None or (k not in self.keys and k not in taken)
                    mask.append(ok)
                    if ok and k is not None:
                        taken.add(k)
                    elif not ok:
                        self.dropped[k] = None
                masks.append(None if all(mask) else pa.array(mask, pa.bool_()))
            for k in list(self.dropped)[:max(0, len(self.dropped) - MAX_DROPPED)]:
                del self.dropped[k]  # nobody asked for them (an import counts its skipped rows instead)
            return masks

    def committed(self, version: int, payloads: list[pa.Table]) -> None:
        with self._mutex:
            for p in payloads:
                self.keys.update(k for k in self.key_fn(p) if k is not None)
            self.version = version  # under the lock nobody else committed since admit() caught up

    def refresh(self) -> None:
        """Catch up now with what other processes committed, not only at this process's next commit: a key looked
        up before it is written here (a reward for a trajectory `lake serve-model` recorded after this server
        started was a 404)."""
        with self._mutex:
            self._catch_up(self._open())

    def _catch_up(self, dt: DeltaTable) -> None:
        """Add the keys of the versions committed (by other processes) since `version`."""
        latest = dt.version()
        if latest <= self.version:
            return
        try:
            for v in range(self.version + 1, latest + 1):
                for file, _ in delta.added_files(self.path, v):
                    self.keys.update(k for k in self.key_fn(store.read_parquet(file, columns=[self.column]))
                                     if k is not None)
        except FileNotFoundError:  # a data file vacuumed since (a guard idle for days): read the table whole
            for uri in dt.file_uris():
                self.keys.update(k for k in self.key_fn(store.read_parquet(uri, columns=[self.column]))
                                 if k is not None)
        self.version = latest

    def pop_dropped(self, keys) -> set:
        """Which of `keys` were refused at commit time (forgotten here once asked)."""
        with self._mutex:
            out = {k for k in keys if k in self.dropped}
            for k in out:
                del self.dropped[k]
            return out


def trajectory_guard(lake: Lake) -> KeyGuard:
    """The trajectory-id index of this Lake object, registered as the `trajectories` guard (one per Lake:
    the watcher and an import in one process share it)."""
    g = lake.guards.get("trajectories")
    if isinstance(g, KeyGuard):
        return g
    with lake.snapshot(for_query="SELECT trajectory_id FROM trajectories") as snap:
        g = KeyGuard(lake, "trajectories", trajectory_keys, "trajectory_id", trajectory_ids(snap),
                     snap.versions["trajectories"])
    lake.guards["trajectories"] = g
    return g


def idempotency_guard(lake: Lake, table: str, keys: set) -> KeyGuard:
    """The `Idempotency-Key` index of `table` (rewards, skills) into `keys`, registered as its guard."""
    with lake.snapshot(for_query=f"SELECT metadata FROM {ident(table)}") as snap:
        rows = snap.arrow(f"SELECT json_extract_string(metadata, '$.idempotency_key') AS k FROM {ident(table)} "
                          "WHERE json_extract_string(metadata, '$.idempotency_key') IS NOT NULL")
        keys.update(f"{table}:{k}" for k in rows.column(0).to_pylist())
        g = KeyGuard(lake, table, idempotency_keys(table), "metadata", keys, snap.versions[table])
    lake.guards[table] = g
    return g


@dataclass(frozen=True)
class Idempotency:
    """A request's `Idempotency-Key` and the sha256 of its body (after gunzip: a retry may compress it anew)."""

    key: str
    body: str

    def metadata(self) -> dict:
        """What a keyed row keeps of its request."""
        return {"idempotency_key": self.key, "idempotency_body": self.body}


# the body a key was first committed with: by one of its rows (trajectories: the duplicate's id, as keyed ids
# are route-specific) or by the key (rewards, skills: one route each)
_BY_ID = ("SELECT json_extract_string(metadata, '$.idempotency_body') FROM trajectories "
          "WHERE trajectory_id = $1 AND json_extract_string(metadata, '$.idempotency_body') IS NOT NULL LIMIT 1")
_BY_KEY = ("SELECT json_extract_string(metadata, '$.idempotency_body') FROM {table} "
           "WHERE json_extract_string(metadata, '$.idempotency_key') = $1 "
           "AND json_extract_string(metadata, '$.idempotency_body') IS NOT NULL LIMIT 1")


class BodyHashes:
    """Which body each Idempotency-Key was committed with: a bounded cache of this process's keyed commits,
    and the lake (a restart, another process) behind it. Rows written before bodies were kept have none:
    such a key is taken as the same body (the old answer, `duplicate`)."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self._known: OrderedDict[str, str] = OrderedDict()

    def committed(self, scope: str, idem: Idempotency) -> None:
        self._known[f"{scope}:{idem.key}"] = idem.body
        self._known.move_to_end(f"{scope}:{idem.key}")
        while len(self._known) > MAX_BODY_HASHES:
            self._known.popitem(last=False)

    def check(self, scope: str, idem: Idempotency, table: str, row_id: str | None = None) -> None:
        """A keyed request found to be a duplicate: BadInput 409 when its key was committed with another body
        (blocking when it reads the lake: call it in a thread). `row_id`: a trajectory id the key's first
        request wrote; else the key is looked up in `table`'s metadata."""
        body = self._known.get(f"{scope}:{idem.key}")
        if body is None:
            sql, arg = (_BY_ID, row_id) if row_id is not None else (_BY_KEY.format(table=ident(table)), idem.key)
            with self.lake.snapshot(for_query=sql) as snap:
                rows = snap.con.execute(sql, [arg]).fetchall()
            if not rows:
                return
            body = rows[0][0]
            self.committed(scope, Idempotency(idem.key, body))
        if body != idem.body:
            raise BadInput(f"Idempotency-Key {idem.key!r} was already used with a different body (sha256 "
                           f"{body[:12]}..., this one {idem.body[:12]}...): a retry must resend the same body; "
                           "use a new key for a new request", field="Idempotency-Key", status=409,
                           kind="idempotency_conflict")
