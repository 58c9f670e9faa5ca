-- Why skill_to_instruction selected what it did: how many current skills pass each of instruction_candidates'
-- first two filters in turn (provenance, then uses >= min_uses), by provenance, so that a selection of none
-- can say which filter took every skill (the shipped sample skills are bundled or hub and have no `.usage.json`).
-- Same variables as instruction_candidates: instruction_provenance, instruction_min_uses.
-- order: provenance
WITH params AS (
    SELECT
        coalesce(getvariable('instruction_min_uses'), 5)::BIGINT AS min_uses,
        coalesce(getvariable('instruction_provenance'), 'agent')::VARCHAR AS provenance
),
s AS (
    SELECT
        s.provenance,
        coalesce(st.uses, 0) AS uses,
        st.name IS NOT NULL AS has_usage,
        (params.provenance = 'all'
         OR list_contains(list_transform(string_split(params.provenance, ','), lambda p: trim(p)), s.provenance))
            AS provenance_ok,
        params.min_uses
    FROM skills_current s
    LEFT JOIN skill_stats st ON st.name = s.name
    CROSS JOIN params
)
SELECT
    provenance,
    count(*) AS skills,
    count(*) FILTER (WHERE has_usage) AS with_usage,
    bool_or(provenance_ok) AS provenance_kept,
    count(*) FILTER (WHERE provenance_ok AND uses >= min_uses) AS kept
FROM s
GROUP BY provenance
