"""How many interactions a dataset export holds, per task: `atropos_trajectory_export` warns when there are fewer
than the guide's minimum for strategy 1 (50 complete interactions before supervised fine-tuning is worth it).

An interaction is one row of the export; for the default `sft` view that is one good trajectory's whole chat
(success or reward over the threshold, at least one assistant answer, duplicates dropped). The counts are read
back from the files the export wrote (their manifest lists them), so they are what a trainer will read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

TASK_COLUMN = "task_id"


@dataclass
class InteractionCount:
    total: int
    minimum: int
    per_task: dict[str, int] = field(default_factory=dict)  # most first; {} when the view has no task_id

    @property
    def enough(self) -> bool:
        return self.total >= self.minimum

    def warning(self) -> str | None:
        if self.enough:
            return None
        tasks = f" over {len(self.per_task)} tasks" if self.per_task else ""
        return (f"only {self.total} complete interactions exported{tasks}; the guide asks for at least {self.minimum} "
                f"before supervised fine-tuning (strategy 1): collect more episodes (lake rollout, lake import)")

    def as_dict(self) -> dict:
        return {"total": self.total, "minimum": self.minimum, "enough": self.enough, "per_task": self.per_task,
                "warning": self.warning()}


def count_interactions(folder: str | os.PathLike, manifest: dict, minimum: int) -> InteractionCount:
    """Rows of the export in `folder` (total from the manifest) and per task_id (read from its data files)."""
    folder = Path(folder)
    columns = {c["name"] for c in manifest["columns"]}
    per_task: dict[str, int] = {}
    if TASK_COLUMN in columns:
        for f in manifest["files"]:
            if f.get("rows") == 0:  # an empty export's file (DuckDB cannot infer an empty JSON file's columns)
                continue
            for task in _task_ids(folder / f["path"]):
                key = "(none)" if task is None else str(task)
                per_task[key] = per_task.get(key, 0) + 1
    ranked = dict(sorted(per_task.items(), key=lambda kv: (-kv[1], kv[0])))
    return InteractionCount(int(manifest["row_count"]), minimum, ranked)


def _task_ids(path: Path) -> list:
    """The task_id column of one data file of any export format (other files of the folder give [])."""
    if path.suffix == ".parquet":
        return pq.read_table(path, columns=[TASK_COLUMN]).column(TASK_COLUMN).to_pylist()
    if path.suffix == ".arrow":  # a datasets save_to_disk shard: an Arrow IPC stream
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all().column(TASK_COLUMN).to_pylist()
    if path.suffix == ".jsonl":
        con = duckdb.connect()
        try:
            rows = con.execute("SELECT task_id FROM read_json_auto(?, format = 'newline_delimited')",
                               [str(path)]).fetchall()
        finally:
            con.close()
        return [r[0] for r in rows]
    return []


def task_rows(count: InteractionCount, most: int = 20) -> list[dict]:
    """Rows for the per-task table: the `most` largest tasks, then one row for the rest."""
    rows = [{"task_id": t, "interactions": n} for t, n in list(count.per_task.items())[:most]]
    rest = list(count.per_task.values())[most:]
    if rest:
        rows.append({"task_id": f"... {len(rest)} more tasks", "interactions": sum(rest)})
    return rows

