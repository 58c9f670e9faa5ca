"""An exactly-once consumer of one table's change feed.

The offset (a Delta version) and the consumer's own state are one JSON file replaced atomically, so a crash
at any point either keeps both the old offset and old state or both new ones: nothing is replayed or lost.
The offset is also registered with the lake (after the checkpoint, so the registry never runs ahead), which
keeps vacuum from deleting files this consumer has yet to read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ground.atomic import read_json, write_json_atomic
from lake.changes import read_changes
from lake.tables import TableSet


@dataclass
class Checkpoint:
    offset: int = 0  # last consumed version; version 0 is the empty table from `lake init`
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChangeBatch:
    rows: pa.Table
    after: int
    upto: int


class Consumer:
    def __init__(self, tables: TableSet, name: str, table: str, checkpoint_path: str | Path):
        self.tables, self.name, self.table = tables, name, table
        self.path = Path(checkpoint_path)

    def load(self) -> Checkpoint:
        if not self.path.exists():
            return Checkpoint()
        data = read_json(self.path)
        return Checkpoint(int(data["offset"]), data.get("state", {}))

    def poll(self, checkpoint: Checkpoint, max_versions: int | None = None) -> ChangeBatch | None:
        latest = self.tables.version(self.table)
        if latest <= checkpoint.offset:
            return None
        upto = latest if max_versions is None else min(latest, checkpoint.offset + max_versions)
        return ChangeBatch(read_changes(self.tables, self.table, checkpoint.offset, upto), checkpoint.offset, upto)

    def commit(self, batch: ChangeBatch, state: dict[str, Any]) -> Checkpoint:
        cp = Checkpoint(batch.upto, state)
        write_json_atomic(self.path, {"consumer": self.name, "table": self.table, "offset": cp.offset,
                                      "state": cp.state})
        self.tables.register_consumer(self.name, {self.table: cp.offset})
        return cp
