-- Every current trajectory (views/trajectories_current.sql: its latest event, late rewards applied), every column,
-- with what the list and the loop derive from it: `ingested_us` (the list's position), `origin` (the trajectory's
-- metadata.source, `lake serve-model`, else the kind of writer that appended it: the envelope source up to its
-- first '-': rollout, import, ingest...), `turns` and `steps_count` (how many), and the two links a run's page
-- follows: `eval_run_id` (metadata.eval_run_id: the evaluation that played it) and `adapter_sha256`
-- (metadata.adapter_sha256: the weights `lake serve-model` served it from). A `where` filter reads these rows.
SELECT
    *,
    epoch_us(ingested_at) AS ingested_us,
    coalesce(json_extract_string(metadata, '$.source'), split_part(source, '-', 1)) AS origin,
    len(messages) AS turns,
    len(steps) AS steps_count,
    json_extract_string(metadata, '$.eval_run_id') AS eval_run_id,
    json_extract_string(metadata, '$.adapter_sha256') AS adapter_sha256
FROM trajectories_current
