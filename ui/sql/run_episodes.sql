-- A run's evaluation episodes (its page): the current row of each trajectory an evaluation wrote, found by the
-- eval run id every evaluation writer puts in metadata.eval_run_id (hermes_eval, online RL's evaluations), among
-- $eval_ids; oldest first, at most $limit, with `total`, how many there are in all. Over the trajectory index
-- (ui/sql/trajectory_index.sql).
SELECT
    trajectory_id, eval_run_id, task_id, env, split, reward, success, policy_version, turns, ingested_at,
    count(*) OVER () AS total
FROM trajectory_index
WHERE list_contains($eval_ids::VARCHAR[], eval_run_id)
ORDER BY ingested_at, trajectory_id
LIMIT $limit
