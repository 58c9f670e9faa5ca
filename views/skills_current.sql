-- Current state of every skill: the latest event per skill name (by occurred_at, then event_id),
-- without skills whose latest event is a deletion.
-- order: name
WITH latest AS (
    SELECT *
    FROM skills
    QUALIFY row_number() OVER (PARTITION BY name ORDER BY occurred_at DESC, event_id DESC) = 1
)
SELECT
    name,
    category,
    path,
    coalesce(provenance, 'agent') AS provenance,
    description,
    frontmatter,
    body,
    metadata,
    event_id,
    occurred_at AS updated_at,
    content_hash
FROM latest
WHERE coalesce(deleted, false) = false
  AND event_type <> 'skill.delete'
