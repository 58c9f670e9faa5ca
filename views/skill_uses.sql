-- Helper for skill_effect: which skills each current trajectory used, one row per (trajectory, skill), with
-- how the use shows (`sources`, sorted):
--   skill_view: an assistant tool call `skill_view` with arguments {"name": ..., "file_path"?} (Hermes
--     tools/skills_tool.py); a call whose result is JSON with "success": false (no such skill) is no use;
--   preload: the `hermes --skill NAME` activation note in a system or user message
--     ([SYSTEM: The user launched this CLI session with the "NAME" skill preloaded. ...]);
--   slash: the `/NAME` slash command's note ([SYSTEM: The user has invoked the "NAME" skill, ...]; older
--     Hermes wrote [IMPORTANT: ...]);
--   bundle: each skill of a stacked bundle ([Loaded as part of the stacked skill invocation "NAME".]);
--   metadata: a writer's own record, the trajectory's `metadata.skills_used` list of names.
-- A reference that is not a known skill name (skills table) is read as a path: its last part is the name
-- (skill_view accepts "category/name").
-- order: trajectory_id, skill
WITH t AS (
    SELECT trajectory_id, event_id, env, task_id, group_id, success, reward, occurred_at, messages, metadata
    FROM trajectories_current
),
msgs AS (
    SELECT trajectory_id, unnest(messages) AS m
    FROM t
),
calls AS (
    SELECT trajectory_id, unnest(m.tool_calls) AS c
    FROM msgs
    WHERE m.role = 'assistant' AND m.tool_calls IS NOT NULL
),
views AS (
    SELECT trajectory_id, c.id AS call_id,
           CASE WHEN json_valid(c.arguments) THEN json_extract_string(c.arguments, '$.name') END AS ref
    FROM calls
    WHERE c.name = 'skill_view'
),
failed AS (
    SELECT DISTINCT trajectory_id, m.tool_call_id AS call_id
    FROM msgs
    WHERE m.role = 'tool' AND m.tool_call_id IS NOT NULL
      AND json_valid(m.content) AND json_extract_string(m.content, '$.success') = 'false'
),
notes AS (
    SELECT trajectory_id, m.content AS text
    FROM msgs
    WHERE m.role IN ('system', 'user') AND m.content LIKE '%skill%'
),
refs AS (
    SELECT v.trajectory_id, v.ref, 'skill_view' AS source
    FROM views v
    ANTI JOIN failed f ON f.trajectory_id = v.trajectory_id AND f.call_id = v.call_id
    WHERE v.ref IS NOT NULL
    UNION ALL
    SELECT trajectory_id, unnest(regexp_extract_all(text,
        'The user launched this CLI session with the "([^"]+)" skill preloaded', 1)), 'preload'
    FROM notes
    UNION ALL
    SELECT trajectory_id, unnest(regexp_extract_all(text, 'The user has invoked the "([^"]+)" skill,', 1)), 'slash'
    FROM notes
    UNION ALL
    SELECT trajectory_id, unnest(regexp_extract_all(text, 'as part of the stacked skill invocation "([^"]+)"', 1)),
           'bundle'
    FROM notes
    UNION ALL
    SELECT trajectory_id, unnest(CAST(json_extract(metadata, '$.skills_used') AS VARCHAR[])), 'metadata'
    FROM t
    WHERE json_valid(metadata) AND json_type(metadata, '$.skills_used') = 'ARRAY'
),
known AS (
    SELECT DISTINCT name FROM skills
),
named AS (
    SELECT r.trajectory_id, r.source,
           CASE WHEN k.name IS NOT NULL THEN k.name
                ELSE regexp_replace(regexp_replace(trim(r.ref), '/(SKILL\.md)?$', ''), '^.*/', '') END AS skill
    FROM refs r
    LEFT JOIN known k ON k.name = trim(r.ref)
    WHERE nullif(trim(r.ref), '') IS NOT NULL
)
SELECT
    n.trajectory_id,
    n.skill,
    list_sort(list_distinct(list(n.source))) AS sources,
    any_value(t.env) AS env,
    any_value(coalesce(t.task_id, t.group_id, t.trajectory_id)) AS task_key,
    any_value(t.success) AS success,
    any_value(t.reward) AS reward,
    any_value(t.occurred_at) AS occurred_at,
    any_value(t.event_id) AS event_id
FROM named n
JOIN t ON t.trajectory_id = n.trajectory_id
WHERE n.skill <> ''
GROUP BY n.trajectory_id, n.skill
