-- The newest rows of ingest_errors (the overview): what a server, watcher or import refused, and why.
SELECT reason, source_path, line, field, excerpt, source, ingested_at
FROM ingest_errors
ORDER BY ingested_at DESC, event_id DESC
LIMIT $limit
