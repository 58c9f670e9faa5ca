-- Preference pairs for TRL's DPOTrainer (conversational preference format): `prompt` is the chat up to the
-- first assistant turn, `chosen` and `rejected` are the rest of two trajectories of the same task that share
-- that prompt exactly. Score = reward, or success as 1/0 when there is no reward.
-- Pairing is one-to-one: within a (task, prompt) group sorted best first, the k-th best is paired with the
-- k-th worst while their score gap is >= `dpo_min_gap` (0.5), so every trajectory is used at most once.
-- order: split, task_id, prompt_hash, pair_index
WITH params AS (
    SELECT coalesce(getvariable('dpo_min_gap'), 0.5)::DOUBLE AS min_gap
),
c AS (
    SELECT
        *,
        list_slice(chat, 1, first_assistant - 1) AS prompt_msgs,
        list_slice(chat, first_assistant, len(chat)) AS completion_msgs,
        md5(list_slice(chat, 1, first_assistant - 1)::VARCHAR) AS prompt_hash
    FROM trajectory_chats
    WHERE first_assistant > 1 AND score IS NOT NULL
),
ranked AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY task_key, prompt_hash ORDER BY score DESC, event_id) AS best_rank,
        count(*) OVER (PARTITION BY task_key, prompt_hash) AS group_size
    FROM c
)
SELECT
    hi.prompt_msgs AS prompt,
    hi.completion_msgs AS chosen,
    lo.completion_msgs AS rejected,
    hi.dataset_split AS split,
    hi.task_key AS task_id,
    hi.best_rank AS pair_index,
    hi.score AS chosen_score,
    lo.score AS rejected_score,
    hi.score - lo.score AS score_gap,
    hi.trajectory_id AS chosen_trajectory_id,
    lo.trajectory_id AS rejected_trajectory_id,
    hi.event_id AS chosen_event_id,
    lo.event_id AS rejected_event_id,
    hi.reward_event_id AS chosen_reward_event_id,
    lo.reward_event_id AS rejected_reward_event_id,
    hi.prompt_hash,
    hi.env
FROM ranked hi
JOIN ranked lo
  ON lo.task_key = hi.task_key
 AND lo.prompt_hash = hi.prompt_hash
 AND lo.best_rank = hi.group_size + 1 - hi.best_rank
CROSS JOIN params
WHERE hi.best_rank < lo.best_rank
  AND hi.score - lo.score >= params.min_gap
