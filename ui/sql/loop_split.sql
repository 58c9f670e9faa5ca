-- The loop split by what produced the trajectories (GET /v1/loop `split`, the loop's chart): per policy_version and
-- `kind`, 'evaluation' (an evaluation's episode: metadata.eval_run_id), 'served' (a call `lake serve-model`
-- recorded: origin 'lake serve-model') or 'other' (rollouts, imports, ingest), over the trajectory index
-- (ui/sql/trajectory_index.sql: current rows, late rewards applied): how many, the success rate and mean reward
-- among those that carry them, when the first was ingested. In the order they first appeared.
SELECT
    policy_version,
    CASE WHEN eval_run_id IS NOT NULL THEN 'evaluation' WHEN origin = 'lake serve-model' THEN 'served'
         ELSE 'other' END AS kind,
    count(*) AS trajectories,
    avg(success::INTEGER) AS success_rate,
    avg(reward) AS mean_reward,
    min(ingested_at) AS first_at
FROM trajectory_index
GROUP BY ALL
ORDER BY min(ingested_at), policy_version NULLS FIRST, kind
