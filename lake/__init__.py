"""The Lachesis event lake: append-only Delta tables of agent events, snapshots in DuckDB, a change feed."""
from lake.autocompact import AutoCompactor, CompactThresholds
from lake.commit import AppendResult
from lake.errors import LakeError, NoLakeError
from lake.lake import Lake, Writer, open_lake, resolve_root
from lake.records import RecordError
from lake.schemas import TABLES
from lake.tables import TableSet, is_lake

__all__ = ["AppendResult", "AutoCompactor", "CompactThresholds", "Lake", "LakeError", "NoLakeError", "RecordError",
           "TABLES", "TableSet", "Writer", "is_lake", "open_lake", "resolve_root"]
