"""The lake's directory: one Delta table per event stream plus the registry of consumers' offsets.

This is the part of a lake that readers need (snapshots, the change feed, compaction, vacuum, consumers),
kept apart from `lake.lake` so that those modules depend on it and `Lake` composes them, without an
import circle. It holds no writers and no open DuckDB connections.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping

import orjson
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lake.as_of import AsOf, parse_as_of
from lake.atomic import write_json_atomic
from lake.errors import LakeError
from lake.schemas import TABLES

MARKER = "_lachesis"


def is_lake(root: str | os.PathLike) -> bool:
    return (Path(root) / MARKER).is_dir()


class TableSet:
    """The Delta tables under one lake root, read at their latest or a pinned version."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        if not is_lake(self.root):
            raise LakeError(f"no lake at {self.root} (create one with `lake init --lake {self.root}`)")
        self._lock = threading.Lock()

    def tables(self) -> list[str]:
        return [t for t in TABLES if (self.root / t / "_delta_log").is_dir()]

    def table_path(self, table: str) -> Path:
        if table not in TABLES:
            raise LakeError(f"unknown table '{table}'; tables: {', '.join(TABLES)}")
        return self.root / table

    def delta_table(self, table: str, version: int | None = None) -> DeltaTable:
        path = self.table_path(table)
        if not (path / "_delta_log").is_dir():
            raise LakeError(f"table '{table}' does not exist in {self.root}; run `lake init`")
        if version is None:
            return DeltaTable(str(path))
        try:
            return DeltaTable(str(path), version=version)
        except DeltaError as exc:
            raise LakeError(f"table '{table}' has no version {version}: {exc}") from None

    def version(self, table: str) -> int:
        return self.delta_table(table).version()

    def resolve_versions(self, as_of: AsOf = None) -> dict[str, int]:
        """Pin every table: None = latest; int N = min(N, latest); {table: N} = those, others latest; any
        spelling of `lake.as_of` (text, a dataset folder or its manifest.json) is parsed first."""
        as_of = parse_as_of(as_of)
        latest = {t: self.version(t) for t in self.tables()}
        if as_of is None:
            return latest
        if isinstance(as_of, int):
            if as_of < 0:
                raise LakeError(f"version must be >= 0, got {as_of}")
            return {t: min(as_of, v) for t, v in latest.items()}
        if isinstance(as_of, Mapping):
            out = dict(latest)
            for t, v in as_of.items():
                if t not in latest:
                    raise LakeError(f"unknown table '{t}' in as-of; tables: {', '.join(latest)}")
                if not 0 <= int(v) <= latest[t]:
                    raise LakeError(f"table '{t}' has versions 0..{latest[t]}, not {v}")
                out[t] = int(v)
            return out

    # -- consumers: how far each has read, so vacuum keeps what it still needs --------------------------
    def register_consumer(self, name: str, offsets: Mapping[str, int]) -> None:
        """Record how far consumer `name` has read each table, so vacuum keeps what it still needs."""
        if not name or "/" in name or name.startswith("."):
            raise LakeError(f"bad consumer name {name!r}")
        path = self.root / MARKER / "consumers" / f"{name}.json"
        with self._lock:
            merged = {**(orjson.loads(path.read_bytes())["offsets"] if path.exists() else {}), **offsets}
            write_json_atomic(path, {"name": name, "offsets": merged})

    def consumers(self) -> dict[str, dict[str, Any]]:
        out = {}
        for p in sorted((self.root / MARKER / "consumers").glob("*.json")):
            out[p.stem] = orjson.loads(p.read_bytes())["offsets"]
        return out
