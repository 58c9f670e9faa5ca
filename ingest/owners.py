"""Which client posted a row, and which client a trajectory belongs to (Hardening IV item 8).

With named tokens (a --token-file of `NAME TOKEN` lines: ingest/config.py) the server records the caller's name in
`metadata.client` of what it writes, trajectories and rewards alike, as `lake serve-model` does for each call it
records: the name comes from the token (require_token), whatever the body says (a `client` key a body sends is
replaced). A client then may post rewards only for its own trajectories (`metadata.client` of the trajectory's
first row is its name) unless its token file line ends with `grader`. With auth off or one unnamed token every
client is the one identity "": nothing is stamped and any known trajectory may be rewarded, as before.

`Owners` looks a trajectory's owner up in the lake (one query for a request's ids, in a worker thread), keeping
what it found in a bounded cache: the first row of a trajectory never changes.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import orjson

from edge.errors import BadInput
from lake import Lake

MAX_OWNERS = 1 << 16  # cached owners (~10 MB at most); older ones are looked up in the lake again
CHUNK = 1000  # ids per lookup query


def stamp_client(record: dict, client: str, field: list) -> dict:
    """`record` with `metadata.client` = `client` (a named caller; "" leaves the record as it is). Metadata given as
    JSON text (an Atropos group's rows) is parsed first; metadata that is no JSON object cannot hold the name: a 422
    naming the field."""
    if not client:
        return record
    meta = record.get("metadata")
    if isinstance(meta, str):
        try:
            meta = orjson.loads(meta)
        except orjson.JSONDecodeError:
            pass
    if meta is not None and not isinstance(meta, dict):
        raise BadInput("metadata must be a JSON object: the server records the posting client in metadata.client",
                       field=field + ["metadata"], status=422, kind="model_type")
    return {**record, "metadata": {**(meta or {}), "client": client}}


_FIRST_ROWS = ("SELECT trajectory_id, json_extract_string(metadata, '$.client') AS client FROM trajectories "
               "WHERE trajectory_id IN ({params}) ORDER BY ingested_at, event_id")


class Owners:
    """trajectory id -> the client that posted it ("" when its first row names none: written with auth off, by
    one unnamed token, `lake import` or `lake watch`)."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self._known: OrderedDict[str, str] = OrderedDict()
        self._mutex = threading.Lock()  # lookups run in worker threads

    def of(self, tids: list[str]) -> dict[str, str]:
        """The owners of `tids` (ids known to be in the lake); blocking when it reads the lake: call it in a
        thread."""
        with self._mutex:
            out = {t: self._known[t] for t in tids if t in self._known}
        missing = sorted({t for t in tids if t not in out})
        found: dict[str, str] = {}
        for i in range(0, len(missing), CHUNK):
            part = missing[i:i + CHUNK]
            sql = _FIRST_ROWS.format(params=", ".join(f"${j}" for j in range(1, len(part) + 1)))
            with self.lake.snapshot(for_query=sql) as snap:
                rows = snap.con.execute(sql, part).fetchall()
            for tid, client in rows:
                found.setdefault(tid, client or "")
        with self._mutex:
            for tid, client in found.items():
                self._remember(tid, client)
        out.update({t: found.get(t, "") for t in missing})
        return out

    def _remember(self, tid: str, client: str) -> None:
        self._known[tid] = client
        self._known.move_to_end(tid)
        while len(self._known) > MAX_OWNERS:
            self._known.popitem(last=False)
