-- Supervised fine-tuning data: the chats of good trajectories, ready for TRL's SFTTrainer
-- (`messages`, plus `tools` when the trajectory's metadata lists them). No column is named like one TRL
-- reads or writes (labels, prompt, completion, input_ids...): late reward labels are `reward_labels`.
-- Good: success is true (unless `SET VARIABLE sft_use_success = false`) or reward >= `sft_min_reward` (0.5).
-- Deduplicated by sample_hash (md5 of the messages): of identical chats the one in the test split, then the
-- best reward, then the first event is kept. `split` is per task (see trajectory_chats), never per row; a served
-- conversation (`served`: recorded by `lake serve-model`) is train unless `sft_served_test_fraction` holds a share out.
-- order: split, sample_hash
WITH params AS (
    SELECT
        coalesce(getvariable('sft_min_reward'), 0.5)::DOUBLE AS min_reward,
        coalesce(getvariable('sft_use_success'), true)::BOOLEAN AS use_success
),
good AS (
    SELECT c.*, md5(c.chat::VARCHAR) AS sample_hash
    FROM trajectory_chats c, params
    WHERE ((params.use_success AND c.success) OR c.reward >= params.min_reward)
      AND c.first_assistant > 0
)
SELECT
    chat AS messages,
    tools,
    dataset_split AS split,
    task_key AS task_id,
    trajectory_id,
    event_id,
    reward_event_id,
    sample_hash,
    reward,
    success,
    env,
    model,
    policy_version,
    split AS env_split,
    labels AS reward_labels,
    served
FROM good
QUALIFY row_number() OVER (
    PARTITION BY sample_hash
    ORDER BY (dataset_split = 'test') DESC, reward DESC NULLS LAST, event_id
) = 1
