-- The trajectory list (GET /v1/trajectories, /ui/trajectories): the current row of each trajectory
-- (views/trajectories_current.sql: its latest event, late rewards applied), filtered, one page after the cursor.
-- Parameters are bound ($name; NULL: no filter). `origin`: the trajectory's metadata.source (`lake serve-model`),
-- else the kind of writer that appended it (the envelope source up to its first '-': rollout, import, ingest...).
-- The reader puts the checked `where` expression (lake.query.check_filter) in place of the marker below, once.
-- Order: ingested_at then event_id, newest first unless $newest is false: a total order, so a page ends at a
-- position (the cursor's $after_us, $after_event) and the next one starts right after it.
WITH t AS (
    SELECT
        *,
        epoch_us(ingested_at) AS ingested_us,
        coalesce(json_extract_string(metadata, '$.source'), split_part(source, '-', 1)) AS origin
    FROM trajectories_current
)
SELECT
    trajectory_id, event_id, ingested_at, ingested_us, occurred_at, origin, env, split, task_id, group_id, model,
    policy_version, reward, success, len(messages) AS turns, len(steps) AS steps
FROM t
WHERE ($env::VARCHAR IS NULL OR env = $env)
  AND ($split::VARCHAR IS NULL OR split = $split)
  AND ($task::VARCHAR IS NULL OR task_id = $task)
  AND ($success::BOOLEAN IS NULL OR success = $success)
  AND ($min_reward::DOUBLE IS NULL OR reward >= $min_reward)
  AND ($max_reward::DOUBLE IS NULL OR reward <= $max_reward)
  AND ($policy_version::VARCHAR IS NULL OR policy_version = $policy_version)
  AND ($source::VARCHAR IS NULL OR origin = $source)
  AND ($since::TIMESTAMPTZ IS NULL OR ingested_at >= $since)
  AND ($until::TIMESTAMPTZ IS NULL OR ingested_at < $until)
  AND ($after_us::BIGINT IS NULL
       OR ($newest AND (ingested_us, event_id) < ($after_us, $after_event::VARCHAR))
       OR (NOT $newest AND (ingested_us, event_id) > ($after_us, $after_event::VARCHAR)))
  AND (/* where */ TRUE)
ORDER BY
    CASE WHEN $newest THEN ingested_us END DESC, CASE WHEN $newest THEN event_id END DESC,
    ingested_us, event_id
LIMIT $limit
