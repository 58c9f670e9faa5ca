-- One trajectory (GET /v1/trajectories/{id}, the conversation page): its current row, every column: the view
-- views/trajectories_current.sql itself (its text put in place of the marker below) over this trajectory's events
-- and late rewards only. The view picks each trajectory's row from that trajectory's events and rewards alone, so
-- the row is the view's; read this way it costs one trajectory's events (DuckDB does not push a filter on
-- trajectory_id through the view's latest-event aggregate: 1.8 s instead of ~0.1 s on a 1M-row lake).
WITH trajectories AS (SELECT * FROM trajectories WHERE trajectory_id = $trajectory_id),
rewards AS (SELECT * FROM rewards WHERE trajectory_id = $trajectory_id)
SELECT *, epoch_us(ingested_at) AS ingested_us
FROM (/* trajectories_current */) AS current_row
