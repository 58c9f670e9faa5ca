-- Rows of every table of the lake (the overview); a table added to lake/schemas.py is added here.
SELECT 'trajectories' AS "table", count(*) AS "rows" FROM trajectories
UNION ALL SELECT 'skills', count(*) FROM skills
UNION ALL SELECT 'skill_usage', count(*) FROM skill_usage
UNION ALL SELECT 'rewards', count(*) FROM rewards
UNION ALL SELECT 'runs', count(*) FROM runs
UNION ALL SELECT 'ingest_errors', count(*) FROM ingest_errors
