-- The trajectory index (ui/reader.py TrajectoryIndex): the narrow columns of every current trajectory that the list
-- shows, filters and sorts by, the loop groups and a run's page looks up (ui/sql/trajectory_rows.sql's rows without messages, steps,
-- tokens or metadata), built once per pinned version of trajectories and rewards and held in memory as Arrow.
SELECT
    trajectory_id, event_id, ingested_at, ingested_us, occurred_at, origin, env, split, task_id, group_id, model,
    policy_version, reward, success, turns, steps_count, eval_run_id, adapter_sha256
FROM /* rows */ trajectory_rows
