-- What was served from a run's weights (its page's lineage): the trajectories `lake serve-model` recorded with one
-- of the run's weights, found by metadata.adapter_sha256 (the served weights' sha256, which the run's events carry
-- in metadata.adapter_sha256) among $shas, by policy_version (the served version's name): how many, the success
-- rate and mean reward among those judged, and when the first and last were ingested. Over the trajectory index
-- (ui/sql/trajectory_index.sql).
SELECT
    policy_version, adapter_sha256, count(*) AS trajectories, avg(success::INTEGER) AS success_rate,
    avg(reward) AS mean_reward, min(ingested_at) AS first_at, max(ingested_at) AS last_at
FROM trajectory_index
WHERE list_contains($shas::VARCHAR[], adapter_sha256)
GROUP BY policy_version, adapter_sha256
ORDER BY min(ingested_at), policy_version
