-- Instruction-tuning pairs from skills (the guide's skill_to_instruction: a skill's task goal, operating
-- constraints and success-verification logic as instruction templates), in `messages` form: one user
-- prompt and one assistant answer per pair. Per usable skill (instruction_candidates with status 'ok'):
--   goal          always: from goal sections, "<description> [This applies when: <when_to_use>] What procedure
--                 should I follow?" -> the steps; from the lead or the description (a skill without goal
--                 sections), "What is the <name> skill for?" -> that text
--   when_to_use   "When should <name> be used?" -> the trigger conditions, when the skill states them
--   constraints   "What constraints must I respect ...?" -> rules, prerequisites, pitfalls, when it has them
--   verification  "How do I verify ...?" -> the checks, when it has them
-- `SET VARIABLE instruction_system_prompt = '...'` adds a system message to every pair.
-- order: skill, kind_index
WITH c AS (
    SELECT * FROM instruction_candidates WHERE status = 'ok'
),
pairs AS (
    SELECT
        c.*,
        unnest([
            {'kind_index': 1, 'kind': 'goal',
             'prompt': CASE WHEN goal_source = 'sections' THEN
                     description
                     || CASE WHEN when_to_use IS NOT NULL THEN chr(10) || chr(10) || 'This applies when:' || chr(10) || when_to_use ELSE '' END
                     || chr(10) || chr(10) || 'What procedure should I follow? Give the exact steps.'
                 ELSE 'What is the "' || name || '" skill for, and what does it do?' END,
             'response': goal},
            {'kind_index': 2, 'kind': 'when_to_use',
             'prompt': 'When should the "' || name || '" skill be used? It is described as: ' || description,
             'response': when_to_use},
            {'kind_index': 3, 'kind': 'constraints',
             'prompt': 'Task: ' || description || chr(10) || chr(10)
                 || 'What constraints must I respect while doing this, and which pitfalls should I avoid?',
             'response': constraints},
            {'kind_index': 4, 'kind': 'verification',
             'prompt': 'Task: ' || description || chr(10) || chr(10) || 'How do I verify that it was done correctly?',
             'response': verification}
        ]) AS p
    FROM c
)
SELECT
    list_filter([
        CASE WHEN getvariable('instruction_system_prompt') IS NOT NULL
             THEN {'role': 'system', 'content': getvariable('instruction_system_prompt')::VARCHAR} END,
        {'role': 'user', 'content': p.prompt},
        {'role': 'assistant', 'content': p.response}
    ], lambda m: m IS NOT NULL) AS messages,
    name AS skill,
    category,
    p.kind AS kind,
    p.kind_index AS kind_index,
    p.prompt AS user_text,
    p.response AS assistant_text,
    uses,
    provenance,
    event_id,
    usage_event_id
FROM pairs
WHERE p.response IS NOT NULL
