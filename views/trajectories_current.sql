-- One row per trajectory_id: its latest event (by occurred_at, then event_id), with the latest late
-- reward, success and labels from `rewards` applied (each field: the latest non-null value).
-- original_reward / original_success keep what the trajectory itself carried.
-- order: trajectory_id
WITH latest AS (
    SELECT trajectory_id, arg_max(event_id, (occurred_at, event_id)) AS event_id
    FROM trajectories
    GROUP BY trajectory_id
),
t AS (
    SELECT trajectories.*
    FROM trajectories
    SEMI JOIN latest ON trajectories.event_id = latest.event_id
),
r AS (
    SELECT
        trajectory_id,
        arg_max(reward, (occurred_at, event_id)) FILTER (WHERE reward IS NOT NULL) AS reward,
        arg_max(success, (occurred_at, event_id)) FILTER (WHERE success IS NOT NULL) AS success,
        arg_max(labels, (occurred_at, event_id)) FILTER (WHERE labels IS NOT NULL) AS labels,
        arg_max(label_source, (occurred_at, event_id)) FILTER (WHERE label_source IS NOT NULL) AS label_source,
        max(event_id) AS reward_event_id,
        count(*) AS reward_events
    FROM rewards
    GROUP BY trajectory_id
)
SELECT
    t.* EXCLUDE (reward, success),
    coalesce(r.reward, t.reward) AS reward,
    coalesce(r.success, t.success) AS success,
    t.reward AS original_reward,
    t.success AS original_success,
    r.labels,
    r.label_source,
    r.reward_event_id,
    coalesce(r.reward_events, 0) AS reward_events
FROM t
LEFT JOIN r ON r.trajectory_id = t.trajectory_id
