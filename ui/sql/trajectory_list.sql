-- The trajectory list (GET /v1/trajectories, /ui/trajectories): a page of current trajectories, filtered, after the
-- cursor. It reads `trajectory_index` (ui/sql/trajectory_index.sql, held in memory per pin), or, with a `where`
-- filter (which may name any column), the whole rows (ui/sql/trajectory_rows.sql) put in place of the source
-- marker; the reader puts the checked `where` expression (lake.query.check_filter) in place of its marker, once.
-- Parameters are bound ($name; NULL: no filter).
-- Order: by the sort key $sort names (ui/params.py SORTS: 'ingested' is none, the time alone), then ingested_at,
-- then event_id, all descending (newest / desc), else ascending: the reader writes the direction at each `dir`
-- marker and the comparison at the `after` marker (DESC and <, or ASC and >: plain keys, so DuckDB takes the top
-- rows without sorting them all). A total order: a page ends at a position (the cursor's $after_*: the last row's
-- key) and the next one starts right after it. The key is the
-- tuple (sort_has, sort_num, sort_text): a row without the sorted value (NULL) sorts below every row with one
-- (last when descending, first when ascending).
WITH k AS (
    SELECT
        *,
        CASE $sort WHEN 'reward' THEN reward WHEN 'turns' THEN turns WHEN 'steps' THEN steps_count
        END::DOUBLE AS sort_value,
        CASE $sort WHEN 'task' THEN task_id WHEN 'env' THEN env WHEN 'policy_version' THEN policy_version
                   WHEN 'trajectory_id' THEN trajectory_id WHEN 'split' THEN split END AS sort_label
    FROM /* source */ trajectory_index
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
      AND (/* where */ TRUE)
),
s AS (
    SELECT
        trajectory_id, event_id, ingested_at, ingested_us, occurred_at, origin, env, split, task_id, group_id, model,
        policy_version, reward, success, turns, steps_count AS steps,
        CASE WHEN $sort = 'ingested' OR sort_value IS NOT NULL OR sort_label IS NOT NULL THEN 1 ELSE 0 END AS sort_has,
        coalesce(sort_value, 0) AS sort_num,
        coalesce(sort_label, '') AS sort_text
    FROM k
)
SELECT *
FROM s
WHERE $after_us::BIGINT IS NULL
   OR (sort_has, sort_num, sort_text, ingested_us, event_id) /* after */ <
      ($after_has::INTEGER, $after_num::DOUBLE, $after_text::VARCHAR, $after_us, $after_event::VARCHAR)
ORDER BY sort_has /* dir */ DESC, sort_num /* dir */ DESC, sort_text /* dir */ DESC, ingested_us /* dir */ DESC,
    event_id /* dir */ DESC
LIMIT $limit
