-- Success per environment and task family (the template a built-in task came from; a file task's own id when it
-- has none) over the current train-split trajectories of models, scripted policies (model 'policy:...') left
-- out: what online RL's curriculum (trainers/rl/curriculum.py) starts from, to pick the tasks a policy solves
-- sometimes. `SET VARIABLE family_success_model = '<model label>'` keeps one model's rows.
-- order: env, family
SELECT
    env,
    coalesce(nullif(CASE WHEN json_valid(metadata) THEN json_extract_string(metadata, '$.template') END, ''),
             task_id) AS family,
    count(*) AS episodes,
    count(*) FILTER (WHERE success) AS successes,
    avg(CASE WHEN success THEN 1.0 ELSE 0.0 END) AS success_rate,
    avg(reward) AS mean_reward,
    max(occurred_at) AS last_at
FROM trajectories_current
WHERE split = 'train'
  AND env IS NOT NULL
  AND coalesce(model, '') NOT LIKE 'policy:%'
  AND (getvariable('family_success_model') IS NULL OR model = getvariable('family_success_model'))
GROUP BY ALL
