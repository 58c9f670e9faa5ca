-- Instruction-tuning pairs from skills (the guide's skill_to_instruction), in `messages` form:
-- one user prompt and one assistant answer per pair, and per usable skill (instruction_candidates with
-- status 'ok') up to four pairs: procedure (prompt from the description and the trigger conditions of
-- "When to Use"; answer: the procedure), when_to_use, pitfalls and verification, each only when the skill
-- has that section. `SET VARIABLE instruction_system_prompt = '...'` adds a system message to every pair.
-- order: skill, kind_index
WITH c AS (
    SELECT * FROM instruction_candidates WHERE status = 'ok'
),
pairs AS (
    SELECT
        c.*,
        unnest([
            {'kind_index': 1, 'kind': 'procedure',
             'prompt': description
                 || CASE WHEN when_to_use IS NOT NULL THEN chr(10) || chr(10) || 'This applies when:' || chr(10) || when_to_use ELSE '' END
                 || chr(10) || chr(10) || 'What procedure should I follow? Give the exact steps.',
             'response': procedure},
            {'kind_index': 2, 'kind': 'when_to_use',
             'prompt': 'When should the "' || name || '" skill be used? It is described as: ' || description,
             'response': when_to_use},
            {'kind_index': 3, 'kind': 'pitfalls',
             'prompt': 'Task: ' || description || chr(10) || chr(10) || 'What are the pitfalls to avoid while doing this?',
             'response': pitfalls},
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
