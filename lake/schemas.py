"""Arrow schemas of the lake's tables: one envelope shared by all, one payload per event stream.

Evolving a schema: add a *nullable* field at the end of a payload below and bump that table's entry in
SCHEMA_VERSIONS. Appends use Delta's `schema_mode="merge"`, so the column is added to the table without
rewriting old files, and snapshots read files with `union_by_name`, so old rows show NULL for it.
Never rename, retype or drop a field: write a new one and migrate readers in views/ instead.
"""
from __future__ import annotations

import pyarrow as pa

ENVELOPE = [
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("event_type", pa.string(), nullable=False),
    pa.field("schema_version", pa.int32(), nullable=False),
    pa.field("occurred_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("content_hash", pa.string(), nullable=False),
]

TOOL_CALL = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
STEP = pa.struct(
    [
        ("observation", pa.string()),
        ("thought", pa.string()),
        ("action", pa.string()),
        ("result", pa.string()),
        ("reward", pa.float64()),
        ("done", pa.bool_()),
    ]
)

# JSON-valued columns hold JSON text (VARCHAR in DuckDB): any shape a client sends survives.
JSON = pa.string()

PAYLOADS: dict[str, list[pa.Field]] = {
    "trajectories": [
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string()),
        pa.field("task_id", pa.string()),
        pa.field("env", pa.string()),
        pa.field("env_tags", pa.list_(pa.string())),
        pa.field("split", pa.string()),
        pa.field("model", pa.string()),
        pa.field("policy_version", pa.string()),
        pa.field("messages", pa.list_(MESSAGE)),
        pa.field("steps", pa.list_(STEP)),
        pa.field("reward", pa.float64()),
        pa.field("success", pa.bool_()),
        pa.field("tokens", pa.list_(pa.int64())),
        pa.field("masks", pa.list_(pa.int64())),
        pa.field("inference_logprobs", pa.list_(pa.float64())),
        pa.field("advantages", pa.list_(pa.float64())),
        pa.field("overrides", JSON),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
    "skills": [
        pa.field("name", pa.string(), nullable=False),
        pa.field("category", pa.string()),
        pa.field("path", pa.string()),
        pa.field("provenance", pa.string()),
        pa.field("description", pa.string()),
        pa.field("frontmatter", JSON),
        pa.field("body", pa.string()),
        pa.field("deleted", pa.bool_()),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
    "skill_usage": [
        pa.field("name", pa.string(), nullable=False),
        pa.field("use_count", pa.int64()),
        pa.field("view_count", pa.int64()),
        pa.field("patch_count", pa.int64()),
        pa.field("last_used_at", pa.string()),
        pa.field("usage", JSON),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
    "rewards": [
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("success", pa.bool_()),
        pa.field("labels", JSON),
        pa.field("label_source", pa.string()),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
    "runs": [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("status", pa.string()),
        pa.field("model", pa.string()),
        pa.field("adapter_path", pa.string()),
        pa.field("config", JSON),
        pa.field("metrics", JSON),
        pa.field("manifest", JSON),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
    "ingest_errors": [
        pa.field("reason", pa.string(), nullable=False),
        pa.field("source_path", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("field", pa.string()),
        pa.field("excerpt", pa.string()),
        pa.field("metadata", JSON),
        pa.field("raw", JSON),
    ],
}

SCHEMA_VERSIONS = {name: 1 for name in PAYLOADS}

DEFAULT_EVENT_TYPES = {
    "trajectories": "trajectory",
    "skills": "skill.upsert",
    "skill_usage": "skill.usage",
    "rewards": "reward",
    "runs": "run",
    "ingest_errors": "ingest.error",
}

TABLES = list(PAYLOADS)


def table_schema(table: str) -> pa.Schema:
    """Full schema of a table: envelope, payload, then the `day` partition column."""
    return pa.schema(ENVELOPE + PAYLOADS[table] + [pa.field("day", pa.string(), nullable=False)])


def payload_schema(table: str) -> pa.Schema:
    return pa.schema(PAYLOADS[table])


def json_columns(table: str) -> set[str]:
    return {f.name for f in PAYLOADS[table] if f.type == JSON and f.name in _JSON_NAMES}


_JSON_NAMES = {"overrides", "metadata", "raw", "frontmatter", "usage", "labels", "config", "metrics", "manifest"}
