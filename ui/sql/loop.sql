-- The loop (GET /v1/loop, /ui/loop): is the agent getting better? Over the current row of each trajectory (the
-- trajectory index, ui/sql/trajectory_index.sql: late rewards applied), one row per policy_version (NULL: none),
-- in the order the versions first appeared: how many trajectories, how many carry a success and a reward, the
-- success rate and the mean reward among those, and when the version's first and last rows were ingested.
SELECT
    policy_version,
    count(*) AS trajectories,
    count(success) AS judged,
    count_if(success) AS successes,
    avg(success::INTEGER) AS success_rate,
    count(reward) AS rewarded,
    avg(reward) AS mean_reward,
    min(ingested_at) AS first_at,
    max(ingested_at) AS last_at
FROM trajectory_index
GROUP BY policy_version
ORDER BY min(ingested_at), policy_version NULLS FIRST
