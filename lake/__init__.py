"""The Lachesis event lake: append-only Delta tables of agent events, snapshots in DuckDB, a change feed."""
from lake.commit import AppendResult
from lake.lake import Lake, LakeError, Writer, resolve_root
from lake.records import RecordError
from lake.schemas import TABLES

__all__ = ["AppendResult", "Lake", "LakeError", "RecordError", "TABLES", "Writer", "resolve_root"]
