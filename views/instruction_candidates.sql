-- Skills selected for instruction tuning, one row each, with the sections the converter uses and whether
-- it can use them. Default filter (the guide's): provenance agent (neither bundled nor hub) and at least
-- `instruction_min_uses` (5) uses, where uses = skill_stats.uses (use_count, with the view_count fallback for
-- old Hermes sidecars). `SET VARIABLE instruction_provenance = 'agent,hub'` (a comma list) or 'all' widens it.
-- status 'skipped' with a reason when the skill has no procedure section (the response of its main pair).
-- order: name
WITH params AS (
    SELECT
        coalesce(getvariable('instruction_min_uses'), 5)::BIGINT AS min_uses,
        coalesce(getvariable('instruction_provenance'), 'agent')::VARCHAR AS provenance
),
selected AS (
    SELECT s.*, coalesce(st.uses, 0) AS uses, coalesce(st.uses_source, 'none') AS uses_source,
           st.use_count, st.view_count, st.usage_event_id
    FROM skills_current s
    LEFT JOIN skill_stats st ON st.name = s.name
    CROSS JOIN params
    WHERE (params.provenance = 'all' OR list_contains(list_transform(string_split(params.provenance, ','), lambda p: trim(p)), s.provenance))
      AND coalesce(st.uses, 0) >= params.min_uses
),
secs AS (
    SELECT
        name,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'when_to_use' AND text <> ''), '') AS when_to_use,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'procedure' AND text <> ''), '') AS procedure_primary,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'procedure_fallback' AND text <> ''), '') AS procedure_fallback,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'pitfalls' AND text <> ''), '') AS pitfalls,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'verification' AND text <> ''), '') AS verification,
        list(heading ORDER BY section_index) AS headings
    FROM skill_sections
    GROUP BY name
)
SELECT
    selected.name,
    selected.category,
    selected.provenance,
    selected.uses,
    selected.uses_source,
    selected.use_count,
    selected.view_count,
    trim(coalesce(nullif(trim(selected.description), ''), selected.name)) AS description,
    secs.when_to_use,
    coalesce(secs.procedure_primary, secs.procedure_fallback) AS procedure,
    secs.pitfalls,
    secs.verification,
    coalesce(secs.headings, []::VARCHAR[]) AS headings,
    CASE WHEN coalesce(secs.procedure_primary, secs.procedure_fallback) IS NULL THEN 'skipped' ELSE 'ok' END AS status,
    CASE
        WHEN trim(coalesce(selected.body, '')) = '' THEN 'empty body'
        WHEN coalesce(secs.procedure_primary, secs.procedure_fallback) IS NULL THEN
            'no procedure section (## Procedure, Workflow, Steps, Instructions, Quick Start or Usage); sections: '
            || coalesce(nullif(array_to_string(secs.headings, ', '), ''), 'none')
    END AS reason,
    selected.event_id,
    selected.usage_event_id
FROM selected
LEFT JOIN secs ON secs.name = selected.name
