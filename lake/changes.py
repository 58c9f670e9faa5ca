"""Change feed: rows added in versions (N, M] of a table, from the commit log, never from a directory listing.

Compaction commits add files with dataChange=false; they re-package old rows and are skipped. The log and
the files are read through the table's filesystem (lake/store.py): a local disk or object storage alike.
"""
from __future__ import annotations

import pyarrow as pa

from lake import delta, store
from lake.schemas import table_schema
from lake.errors import LakeError
from lake.tables import TableSet


def read_changes(tables: TableSet, table: str, after_version: int, upto_version: int | None = None) -> pa.Table:
    path = tables.table_path(table)
    latest = tables.version(table)
    upto = latest if upto_version is None else upto_version
    if upto > latest:
        raise LakeError(f"table '{table}' is at version {latest}, cannot read changes up to {upto}")
    schema = table_schema(table)
    pieces = []
    for version in range(after_version + 1, upto + 1):
        for file, partitions in delta.added_files(path, version):
            t = store.read_parquet(file)
            for key, value in partitions.items():
                if key not in t.column_names:
                    t = t.append_column(key, pa.array([value] * t.num_rows, pa.string()))
            t = t.append_column("_commit_version", pa.array([version] * t.num_rows, pa.int64()))
            pieces.append(t)
    if not pieces:
        return pa.schema(list(schema) + [pa.field("_commit_version", pa.int64())]).empty_table()
    out = pa.concat_tables(pieces, promote_options="permissive")
    order = [n for n in schema.names if n in out.column_names]
    rest = [n for n in out.column_names if n not in order]
    return out.select(order + rest)
