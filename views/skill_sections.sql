-- Helper for instruction: the `## ` sections of every current skill's markdown body, in order, with the
-- kind the instruction converter uses them as (when_to_use, procedure, procedure_fallback, pitfalls,
-- verification, or NULL). A `## ` line inside a ``` code fence is not a heading; `### ` subsections stay
-- inside their section; a heading's "1. " numbering and closing #s are dropped.
-- order: name, section_index
WITH b AS (
    SELECT name, replace(coalesce(body, ''), chr(13) || chr(10), chr(10)) AS body
    FROM skills_current
),
masked AS (
    SELECT
        name,
        chr(10) || array_to_string(list_transform(string_split(body, '```'), lambda p, i:
            CASE WHEN i % 2 = 0 THEN replace(p, chr(10) || '#', chr(10) || chr(1) || '#') ELSE p END), '```') AS body
    FROM b
),
parts AS (
    SELECT name, unnest(list_transform(regexp_split_to_array(body, '\n##[ \t]+'), lambda p, i: {'i': i, 'p': p})) AS u
    FROM masked
),
sections AS (
    SELECT
        name,
        u.i - 1 AS section_index,
        trim(regexp_replace(regexp_replace(split_part(u.p, chr(10), 1), '[ \t]+#+[ \t]*$', ''), '^[0-9]+[.)][ \t]*', '')) AS heading,
        trim(replace(CASE WHEN strpos(u.p, chr(10)) > 0 THEN substr(u.p, strpos(u.p, chr(10)) + 1) ELSE '' END, chr(1), ''),
             chr(10) || chr(13) || chr(9) || ' ') AS text
    FROM parts
    WHERE u.i > 1
)
SELECT
    name,
    section_index,
    heading,
    text,
    CASE
        WHEN regexp_matches(lower(heading), '\bnot\b') THEN NULL
        WHEN regexp_matches(lower(heading), '^(when (to|you should|should you|should i) (use|apply|invoke|load)|when to reach for|use (this|it) when|triggers?\b|trigger conditions|when$|use cases?\b)')
            THEN 'when_to_use'
        WHEN regexp_matches(lower(heading), '(pitfall|gotcha|common (issues|mistakes|errors|problems|failures)|caveat|troubleshoot|anti-?pattern|known issues)')
            THEN 'pitfalls'
        WHEN regexp_matches(lower(heading), '(verif|validat|testing|success criteria|checklist|how to (check|test|confirm)|sanity check)')
            THEN 'verification'
        WHEN regexp_matches(lower(heading), '(procedure|workflow|steps|step-by-step|instructions|how to use|process|method)')
            THEN 'procedure'
        WHEN regexp_matches(lower(heading), '(quick ?start|quick reference|usage|how to run|getting started|commands)')
            THEN 'procedure_fallback'
    END AS kind
FROM sections
