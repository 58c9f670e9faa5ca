-- Use, view and patch counts per skill. A skill_usage event carries the absolute counters of one Hermes
-- `.usage.json` entry (a snapshot, not an increment), so the latest event per name wins.
-- `uses` is the count filters should use: use_count, or, for old sidecars whose use_count is 0
-- (before hermes-agent#17932 bump_use had no callers), view_count; with
-- `SET VARIABLE skill_uses_fallback = 'activity'` the fallback is use + view + patch instead.
-- order: name
WITH latest AS (
    SELECT *
    FROM skill_usage
    QUALIFY row_number() OVER (PARTITION BY name ORDER BY occurred_at DESC, event_id DESC) = 1
),
counts AS (
    SELECT
        name,
        coalesce(use_count, try_cast(json_extract_string(usage, '$.use_count') AS BIGINT), 0) AS use_count,
        coalesce(view_count, try_cast(json_extract_string(usage, '$.view_count') AS BIGINT), 0) AS view_count,
        coalesce(patch_count, try_cast(json_extract_string(usage, '$.patch_count') AS BIGINT), 0) AS patch_count,
        coalesce(last_used_at, json_extract_string(usage, '$.last_used_at')) AS last_used_at,
        json_extract_string(usage, '$.last_viewed_at') AS last_viewed_at,
        json_extract_string(usage, '$.last_patched_at') AS last_patched_at,
        json_extract_string(usage, '$.created_by') AS created_by,
        json_extract_string(usage, '$.state') AS state,
        coalesce(try_cast(json_extract_string(usage, '$.pinned') AS BOOLEAN), false) AS pinned,
        event_id AS usage_event_id,
        occurred_at AS usage_updated_at
    FROM latest
)
SELECT
    name,
    use_count,
    view_count,
    patch_count,
    use_count + view_count + patch_count AS activity_count,
    CASE
        WHEN use_count > 0 THEN use_count
        WHEN coalesce(getvariable('skill_uses_fallback'), 'view') = 'activity' THEN use_count + view_count + patch_count
        ELSE view_count
    END AS uses,
    CASE
        WHEN use_count > 0 THEN 'use_count'
        WHEN coalesce(getvariable('skill_uses_fallback'), 'view') = 'activity' THEN 'activity_count'
        ELSE 'view_count'
    END AS uses_source,
    last_used_at,
    last_viewed_at,
    last_patched_at,
    created_by,
    state,
    pinned,
    usage_event_id,
    usage_updated_at
FROM counts
