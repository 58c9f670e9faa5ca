"""What `lake watch`'s passes report, shared by the skills mirror and the inbox.

One `Journal` per watcher: the lake writer both append with (one writer id per process), the counters
(`stats`, what `lake watch --once --json` prints), the echo of each change (a line per skill or file; the log
without one), and each error recorded once per key in `ingest_errors`. The keys already recorded are read
from the lake at start, so a restarted watcher does not record the same error again.
"""
from __future__ import annotations

import logging

from edge.errors import BadInput
from lake import Lake
from lake.lake import process_writer_id

log = logging.getLogger("lachesis.ingest.watch")


class Journal:
    def __init__(self, lake: Lake, writer_name: str = "ingest-watch", echo=None):
        self.writer = lake.writer(process_writer_id(writer_name))
        self.echo = echo or (lambda msg: log.info(msg))
        self.stats = {"skill_upserts": 0, "skill_deletes": 0, "usage_events": 0, "files_done": 0,
                      "trajectories": 0, "duplicates": 0, "files_rejected": 0, "errors": 0, "passes": 0}
        self.reported: set[str] = set()
        with lake.snapshot() as snap:
            for r in snap.arrow("SELECT json_extract_string(metadata, '$.key') AS k FROM ingest_errors").to_pylist():
                if r["k"]:
                    self.reported.add(r["k"])

    def error(self, path: str, exc: BadInput, key: str, extra: dict | None = None) -> None:
        """Record `exc` about `path` in ingest_errors, unless an error of this key is recorded already."""
        if key in self.reported:
            return
        self.writer.append("ingest_errors", [exc.error_record(path, "watch", key=key, **(extra or {}))])
        self.reported.add(key)
        self.stats["errors"] += 1
        self.echo(f"error {path}: {exc.describe()}")
