-- RL replay: one row per step of every current trajectory that has steps: observation, thought, action,
-- result, reward, done, the next observation, and the discounted return-to-go with `replay_gamma` (1.0).
-- A missing step reward is 0, except that a trajectory whose steps carry no rewards at all gets its
-- episode reward on the last step. `done` defaults to true on the last step only.
-- order: trajectory_id, step_index
WITH params AS (
    SELECT coalesce(getvariable('replay_gamma'), 1.0)::DOUBLE AS gamma
),
s AS (
    SELECT
        t.trajectory_id,
        t.task_id,
        t.group_id,
        t.env,
        t.model,
        t.policy_version,
        t.event_id,
        t.reward_event_id,
        t.reward AS episode_reward,
        t.success AS episode_success,
        len(t.steps) AS n_steps,
        list_bool_or(list_transform(t.steps, lambda x: x.reward IS NOT NULL)) AS has_step_rewards,
        unnest(list_transform(t.steps, lambda x, i: {'i': i, 'step': x})) AS u
    FROM trajectories_current t
    WHERE len(t.steps) > 0
),
steps AS (
    SELECT
        * EXCLUDE (u),
        u.i - 1 AS step_index,
        u.step.observation AS observation,
        u.step.thought AS thought,
        u.step.action AS action,
        u.step.result AS result,
        CASE
            WHEN u.step.reward IS NOT NULL THEN u.step.reward
            WHEN NOT coalesce(has_step_rewards, false) AND u.i = n_steps THEN coalesce(episode_reward, 0.0)
            ELSE 0.0
        END AS reward,
        coalesce(u.step.done, u.i = n_steps) AS done
    FROM s
)
SELECT
    trajectory_id,
    step_index,
    task_id,
    group_id,
    env,
    model,
    policy_version,
    observation,
    thought,
    action,
    result,
    reward,
    done,
    lead(observation) OVER w AS next_observation,
    CASE
        WHEN params.gamma = 1.0 THEN sum(reward) OVER wf
        WHEN params.gamma = 0.0 THEN reward
        ELSE sum(reward * pow(params.gamma, step_index)) OVER wf / pow(params.gamma, step_index)
    END AS "return",
    step_index = n_steps - 1 AS is_last,
    n_steps,
    episode_reward,
    episode_success,
    event_id,
    reward_event_id
FROM steps, params
WINDOW
    w AS (PARTITION BY trajectory_id ORDER BY step_index),
    wf AS (PARTITION BY trajectory_id ORDER BY step_index ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
