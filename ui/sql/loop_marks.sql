-- The loop's marks (GET /v1/loop, /ui/loop): each training event of the runs table (kind 'train': a finished
-- training run, each increment of a streaming trainer, which also carries metrics.increment), oldest first, with
-- when it was ingested: where new weights appeared on the timeline of success and reward.
SELECT
    run_id,
    TRY_CAST(json_extract(metrics, '$.increment') AS BIGINT) AS increment,
    json_extract_string(metadata, '$.serial') AS serial,
    ingested_at
FROM runs
WHERE kind = 'train'
ORDER BY ingested_at, event_id
LIMIT $limit
