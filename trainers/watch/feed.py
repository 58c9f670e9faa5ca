"""What one increment of the streaming trainer consumes: the rows the followed tables gained since the watcher's
offsets (the lake's change feed: commits' new-data adds, never compaction), and the view's rows built from them.

The view runs on a snapshot pinned at the versions the increment consumes up to, and keeps the rows whose source
event is among the consumed ones (trainers/watch/config.py's recipes name the columns): a view can deduplicate,
join late rewards and filter on the whole lake, which a view over the new rows alone could not. Replayed rows
are older rows of the same view, drawn by a seeded hash, so a restarted increment replays the same ones.
The view runs with `sft_served_test_fraction` set from --served-test-fraction (default 0: a served conversation
trains whatever its hash; views/trajectory_chats.sql).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from lake import Lake
from lake.query import ident
from trainers.watch.config import WatchConfig

NEW_IDS = "__watch_new_ids"


@dataclass
class Increment:
    after: dict[str, int]  # offsets before: versions already consumed, per followed table
    upto: dict[str, int]  # the versions this increment consumes up to
    rows: dict[str, int]  # change-feed rows per table in (after, upto]
    events_sha256: str  # of the sorted consumed event ids: which rows, checkable against the change feed
    new: list[dict]  # view rows built from consumed events
    replay: list[dict]  # older view rows replayed against forgetting

    @property
    def consumed(self) -> int:
        return sum(self.rows.values())


def events_digest(event_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(event_ids)).encode()).hexdigest()


def read_increment(lake: Lake, cfg: WatchConfig, offsets: dict[str, int]) -> Increment | None:
    """The next increment after `offsets`, or None when the followed tables gained no rows (nothing committed, or
    only compactions). With cfg.max_versions the window grows by that many versions until it holds rows."""
    latest = {t: lake.version(t) for t in cfg.follow}
    upto = dict(offsets)
    ids: list[str] = []
    rows: dict[str, int] = {t: 0 for t in cfg.follow}
    while not ids and any(upto[t] < latest[t] for t in cfg.follow):
        step = cfg.max_versions or max(latest[t] - upto[t] for t in cfg.follow)
        for t in cfg.follow:
            end = min(latest[t], upto[t] + step)
            if end > upto[t]:
                got = lake.changes(t, upto[t], end).column("event_id").to_pylist()
                rows[t] += len(got)
                ids.extend(got)
                upto[t] = end
    if not ids:
        return None
    new, replay = _view_rows(lake, cfg, upto, ids)
    return Increment(dict(offsets), upto, rows, events_digest(ids), new, replay)


def _view_rows(lake: Lake, cfg: WatchConfig, upto: dict[str, int], ids: list[str]) -> tuple[list[dict], list[dict]]:
    view = cfg.view
    is_new = " OR ".join(f"coalesce({ident(col)} IN (SELECT id FROM {NEW_IDS}), false)" for col in cfg.follow.values())
    with lake.snapshot(as_of=upto, for_query=f"SELECT * FROM {ident(view)}") as snap:
        snap.con.register(NEW_IDS, pa.table({"id": pa.array(ids, pa.string())}))
        snap.con.execute("SET VARIABLE sft_served_test_fraction = ?", [float(cfg.served_test_fraction)])
        new = snap.arrow(f"SELECT * FROM {ident(view)} WHERE {is_new} ORDER BY event_id").to_pylist()
        wanted = round(cfg.replay * len(new))
        replay = []
        if wanted:
            seed = int(cfg.seed) + sum(upto.values())  # a new draw per increment, the same one when it is redone
            replay = snap.arrow(f"SELECT * FROM {ident(view)} WHERE NOT ({is_new}) "
                                f"ORDER BY hash(event_id, {seed}) LIMIT {wanted}").to_pylist()
    return new, replay
