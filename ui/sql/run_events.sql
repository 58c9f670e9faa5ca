-- One run's events (GET /v1/runs/{run_id}, /ui/runs/{run_id}): every row of the runs table with this run_id (a
-- training run's end, an online RL run's checkpoints, an evaluation's record), oldest first.
SELECT
    run_id, kind, status, model, adapter_path, config, metrics, manifest, metadata, event_id, event_type,
    occurred_at, ingested_at
FROM runs
WHERE run_id = $run_id
ORDER BY ingested_at, event_id
