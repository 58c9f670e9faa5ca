-- The skills page: every current skill (views/skills_current.sql: the latest event per name, deletions gone) with
-- its usage (views/skill_stats.sql: the latest .usage.json counters; `uses` is what skill_to_instruction filters
-- on), by name, at most $limit.
SELECT
    s.name, s.category, s.provenance, s.description, s.path,
    u.uses, u.use_count, u.view_count, u.patch_count, u.last_used_at
FROM skills_current s
LEFT JOIN skill_stats u ON u.name = s.name
ORDER BY s.name
LIMIT $limit
