-- Skills selected for instruction tuning, one row each, with the text of each role the converter uses
-- (skill_sections: goal, constraints, verification, when_to_use). Default filter (the guide's): provenance
-- agent (neither bundled nor hub) and at least `instruction_min_uses` (5) uses, where uses = skill_stats.uses
-- (use_count, with the view_count fallback for old Hermes sidecars). `SET VARIABLE instruction_provenance =
-- 'agent,hub'` (a comma list) or 'all' widens it. Recent and proven effective (skill_effect), each off unless set:
-- `instruction_since` (a timestamp): the skill's current version occurred at or after it;
-- `instruction_min_success`: the success rate of the trajectories that used it is at least this;
-- `instruction_min_lift`: the lower bound of its success_diff interval against the baseline is at least this.
-- Every selected skill yields a goal: its goal sections, else the body's lead (the text before the first
-- `## `), else its description (goal_source says which). status 'skipped' (with a reason) only for a skill
-- with neither a body nor a description.
-- order: name
WITH selected AS (  -- the filter itself: instruction_filters
    SELECT * EXCLUDE (has_usage, provenance_ok, uses_ok, evidence_ok)
    FROM instruction_filters
    WHERE provenance_ok AND uses_ok AND coalesce(evidence_ok, false)
),
secs AS (
    SELECT
        name,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'lead' AND text <> ''), '') AS lead,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'when_to_use' AND text <> ''), '') AS when_to_use,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'goal' AND text <> ''), '') AS goal_sections,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'constraints' AND text <> ''), '') AS constraints,
        nullif(string_agg(text, chr(10) || chr(10) ORDER BY section_index) FILTER (WHERE kind = 'verification' AND text <> ''), '') AS verification,
        list(heading ORDER BY section_index) FILTER (WHERE section_index > 0) AS headings
    FROM skill_sections
    GROUP BY name
),
joined AS (
    SELECT
        selected.*,
        nullif(trim(coalesce(selected.description, '')), '') AS described,
        secs.lead, secs.when_to_use, secs.goal_sections, secs.constraints, secs.verification, secs.headings
    FROM selected
    LEFT JOIN secs ON secs.name = selected.name
)
SELECT
    name,
    category,
    provenance,
    uses,
    uses_source,
    use_count,
    view_count,
    updated_at,
    used_in_trajectories,
    success_rate,
    success_diff,
    success_diff_low,
    coalesce(described, name) AS description,
    when_to_use,
    coalesce(goal_sections, lead, described) AS goal,
    CASE WHEN goal_sections IS NOT NULL THEN 'sections' WHEN lead IS NOT NULL THEN 'lead'
         WHEN described IS NOT NULL THEN 'description' END AS goal_source,
    constraints,
    verification,
    coalesce(headings, []::VARCHAR[]) AS headings,
    CASE WHEN coalesce(goal_sections, lead, described) IS NULL THEN 'skipped' ELSE 'ok' END AS status,
    CASE WHEN coalesce(goal_sections, lead, described) IS NULL THEN 'empty body and no description' END AS reason,
    event_id,
    usage_event_id
FROM joined
