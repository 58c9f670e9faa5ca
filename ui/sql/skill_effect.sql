-- The skills page: the skill_effect view (views/skill_effect.sql) as it is, one row per skill: trajectories that
-- used it, their success rate with its interval, the same envs' baseline without it, and the difference with its
-- interval; by skill, at most $limit.
SELECT * FROM skill_effect ORDER BY skill LIMIT $limit
