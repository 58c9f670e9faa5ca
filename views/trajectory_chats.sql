-- Helper for sft and dpo: every current trajectory with its chat in the form chat templates and TRL take
-- (a list of messages {role, content, reasoning, tool_calls, tool_call_id, name}; tool calls in OpenAI form
-- {id, type: 'function', function: {name, arguments: JSON text}}; roles human/gpt become user/assistant;
-- absent fields are NULL), its task key and its dataset split. A message that carries structured tool_calls
-- (or reasoning) has the `<tool_call>` blocks (or the leading `<think>` block) removed from its content, so a
-- chat template does not render them twice.
-- Task key: task_id, else group_id (an Atropos group shares one prompt), else trajectory_id.
-- Split: per task, never per trajectory, so a task is in exactly one split. With the default
-- `sft_split_source = 'auto'` a task that any trajectory marks as a held-out split (test, test_families: the
-- environments' held-out task families, eval, validation) is
-- test, one marked train is train, and the rest are split by md5(task_id) with `sft_test_fraction` (0.1) as test.
-- `SET VARIABLE sft_split_source = 'hash'` ignores the trajectories' own split column, except test_families.
-- Served conversations (every trajectory of the task recorded by `lake serve-model`: metadata.source) are train
-- whatever their hash: a held-out share of them is opt-in, `SET VARIABLE sft_served_test_fraction = 0.1` (default
-- 0), by the same md5 rule. They carry no task of their own (task key = trajectory id), so the hash held one in ten
-- out of every training by default, silently. `served`: this trajectory was.
-- order: trajectory_id
WITH params AS (
    SELECT
        coalesce(getvariable('sft_test_fraction'), 0.1)::DOUBLE AS test_fraction,
        coalesce(getvariable('sft_split_source'), 'auto')::VARCHAR AS split_source,
        coalesce(getvariable('sft_served_test_fraction'), 0.0)::DOUBLE AS served_test_fraction
),
task_flags AS (
    SELECT
        coalesce(task_id, group_id, trajectory_id) AS task_key,
        bool_or(lower(split) IN ('test', 'test_families', 'eval', 'evaluation', 'validation', 'valid', 'val', 'heldout', 'held_out', 'held-out')) AS marked_test,
        bool_or(lower(split) = 'train') AS marked_train,
        bool_or(lower(split) = 'test_families') AS held_out_family,
        -- contains() first: a substring scan spares the other rows two JSON parses of their metadata
        bool_and(CASE WHEN contains(metadata, 'lake serve-model') AND json_valid(metadata)
                      THEN json_extract_string(metadata, '$.source') = 'lake serve-model'
                      ELSE false END IS TRUE) AS served
    FROM trajectories_current
    GROUP BY 1
),
tasks AS (
    SELECT
        task_key,
        CASE
            WHEN held_out_family THEN 'test'  -- a held-out family never trains, whatever sft_split_source says
            WHEN params.split_source <> 'hash' AND marked_test THEN 'test'
            WHEN params.split_source <> 'hash' AND marked_train THEN 'train'
            WHEN served THEN CASE  -- held out only when asked for (sft_served_test_fraction)
                WHEN (md5_number(task_key) % 1000000)::DOUBLE < params.served_test_fraction * 1000000 THEN 'test'
                ELSE 'train' END
            WHEN (md5_number(task_key) % 1000000)::DOUBLE < params.test_fraction * 1000000 THEN 'test'
            ELSE 'train'
        END AS dataset_split
    FROM task_flags, params
)
SELECT
    t.*,
    coalesce(t.task_id, t.group_id, t.trajectory_id) AS task_key,
    tasks.dataset_split,
    coalesce(t.reward, CASE WHEN t.success THEN 1.0 WHEN NOT t.success THEN 0.0 END) AS score,
    list_position(list_transform(t.messages, lambda m: m.role IN ('assistant', 'gpt')), true) AS first_assistant,
    list_transform(t.messages, lambda m: {
        'role': CASE m.role WHEN 'human' THEN 'user' WHEN 'gpt' THEN 'assistant' ELSE m.role END,
        'content': CASE
            WHEN len(m.tool_calls) > 0 THEN trim(regexp_replace(
                CASE WHEN nullif(m.reasoning, '') IS NOT NULL
                     THEN regexp_replace(coalesce(m.content, ''), '(?s)^\s*<think>.*?</think>', '')
                     ELSE coalesce(m.content, '') END,
                '(?s)<tool_call>.*?</tool_call>', '', 'g'), chr(10) || chr(13) || chr(9) || ' ')
            WHEN nullif(m.reasoning, '') IS NOT NULL
                THEN trim(regexp_replace(coalesce(m.content, ''), '(?s)^\s*<think>.*?</think>', ''), chr(10) || chr(13) || chr(9) || ' ')
            ELSE coalesce(m.content, '')
        END,
        'reasoning': nullif(m.reasoning, ''),
        'tool_calls': CASE WHEN len(m.tool_calls) > 0 THEN list_transform(m.tool_calls, lambda c: {
            'id': c.id,
            'type': 'function',
            'function': {'name': c.name, 'arguments': coalesce(nullif(trim(c.arguments), ''), '{}')}
        }) END,
        'tool_call_id': m.tool_call_id,
        'name': m.name
    }) AS chat,
    CASE WHEN json_valid(t.metadata) THEN json_extract(t.metadata, '$.tools') END AS tools,
    CASE WHEN contains(t.metadata, 'lake serve-model') AND json_valid(t.metadata)
         THEN json_extract_string(t.metadata, '$.source') = 'lake serve-model' ELSE false END IS TRUE AS served
FROM trajectories_current t
JOIN tasks ON tasks.task_key = coalesce(t.task_id, t.group_id, t.trajectory_id)
