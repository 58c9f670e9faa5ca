-- One trajectory (GET /v1/trajectories/{id}, the conversation page): its current row (views/trajectories_current.sql:
-- the latest event, late rewards applied), every column.
SELECT *, epoch_us(ingested_at) AS ingested_us
FROM trajectories_current
WHERE trajectory_id = $trajectory_id
