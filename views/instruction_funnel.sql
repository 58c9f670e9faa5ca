-- Why skill_to_instruction selected what it did: how many current skills pass each of instruction_candidates'
-- first two filters in turn (provenance, then uses >= min_uses), by provenance, so that a selection of none
-- can say which filter took every skill (the shipped sample skills are bundled or hub and have no `.usage.json`).
-- The flags come from instruction_filters (its variables: instruction_provenance, instruction_min_uses).
-- order: provenance
SELECT
    provenance,
    count(*) AS skills,
    count(*) FILTER (WHERE has_usage) AS with_usage,
    bool_or(provenance_ok) AS provenance_kept,
    count(*) FILTER (WHERE provenance_ok AND uses_ok) AS kept
FROM instruction_filters
GROUP BY provenance
