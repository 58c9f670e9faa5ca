-- Every current skill with what skill_to_instruction filters on and one flag per filter, the one place the filter
-- is written: instruction_candidates keeps the rows where all hold, instruction_funnel counts where each fails.
-- Variables: `instruction_provenance` ('agent' by default, a comma list, or 'all'), `instruction_min_uses` (5;
-- uses = skill_stats.uses), and, each off unless set, `instruction_since` (the version's time),
-- `instruction_min_success` and `instruction_min_lift` (skill_effect's success_rate, success_diff_low).
-- order: name
WITH params AS (
    SELECT
        coalesce(getvariable('instruction_min_uses'), 5)::BIGINT AS min_uses,
        coalesce(getvariable('instruction_provenance'), 'agent')::VARCHAR AS provenance,
        getvariable('instruction_since')::TIMESTAMPTZ AS since,
        getvariable('instruction_min_success')::DOUBLE AS min_success,
        getvariable('instruction_min_lift')::DOUBLE AS min_lift
)
SELECT s.*, coalesce(st.uses, 0) AS uses, coalesce(st.uses_source, 'none') AS uses_source,
       st.use_count, st.view_count, st.usage_event_id,
       e.trajectories AS used_in_trajectories, e.success_rate, e.success_diff, e.success_diff_low,
       st.name IS NOT NULL AS has_usage,
       (params.provenance = 'all'
        OR list_contains(list_transform(string_split(params.provenance, ','), lambda p: trim(p)), s.provenance))
           AS provenance_ok,
       coalesce(st.uses, 0) >= params.min_uses AS uses_ok,
       (params.since IS NULL OR s.updated_at >= params.since)
       AND (params.min_success IS NULL OR e.success_rate >= params.min_success)
       AND (params.min_lift IS NULL OR e.success_diff_low >= params.min_lift) AS evidence_ok
FROM skills_current s
LEFT JOIN skill_stats st ON st.name = s.name
LEFT JOIN skill_effect e ON e.skill = s.name
CROSS JOIN params
