-- The runs table's rows (GET /v1/runs, the overview): every event of every run (training runs, increments,
-- evaluations, the Atropos queue's records), newest first unless $newest is false, one page after the cursor;
-- $kind and $run_id (NULL: no filter) keep one kind or one run's events.
WITH r AS (SELECT *, epoch_us(ingested_at) AS ingested_us FROM runs)
SELECT
    run_id, kind, status, model, adapter_path, config, metrics, manifest, metadata, event_id, event_type,
    occurred_at, ingested_at, ingested_us
FROM r
WHERE ($kind::VARCHAR IS NULL OR kind = $kind)
  AND ($run_id::VARCHAR IS NULL OR run_id = $run_id)
  AND ($after_us::BIGINT IS NULL
       OR ($newest AND (ingested_us, event_id) < ($after_us, $after_event::VARCHAR))
       OR (NOT $newest AND (ingested_us, event_id) > ($after_us, $after_event::VARCHAR)))
ORDER BY
    CASE WHEN $newest THEN ingested_us END DESC, CASE WHEN $newest THEN event_id END DESC,
    ingested_us, event_id
LIMIT $limit
