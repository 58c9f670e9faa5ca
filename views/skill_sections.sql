-- Helper for instruction: every current skill's markdown body cut into its lead (section_index 0: the text
-- before the first `## `, without the `# ` title) and its `## ` sections, in order, each with the role the
-- instruction converter gives it. The guide turns a skill's task goal, operating constraints and
-- success-verification logic into instructions, so a section's role is one of
--   goal          how the task is done: steps, commands, a workflow, an operating loop, a path through it
--   constraints   what must (not) be done: rules, guardrails, prerequisites, pitfalls, troubleshooting
--   verification  how success is checked: verification, validation, tests, checklists
--   when_to_use   the trigger conditions (a heading such as "When to Use"), context for the goal
-- or NULL (references, attribution, descriptive prose). Roles are read from the content, not from a fixed
-- list of headings: keywords of the heading count 3, and the body's signals (numbered steps, imperative
-- lines and code blocks (2 each); must/never/always/don't/avoid; verify/check/test/confirm/expect) add their share
-- (below 1), so a heading decides when it speaks for one role, the body breaks a tie between the roles a
-- heading names, and the body alone decides for a heading that names none ("Operating Loop" with numbered
-- steps, "Path 1 ..." with commands) when it has at least 3 signals of the role.
-- A `## ` line inside a ``` code fence is not a heading; `### ` subsections stay inside their section; a
-- heading's "1. " numbering and closing #s are dropped.
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
        CASE WHEN u.i > 1 THEN
            trim(regexp_replace(regexp_replace(split_part(u.p, chr(10), 1), '[ \t]+#+[ \t]*$', ''), '^[0-9]+[.)][ \t]*', ''))
        END AS heading,
        trim(replace(CASE
                 WHEN u.i = 1 THEN regexp_replace(u.p, '^\s*#[ \t][^\n]*', '')
                 WHEN strpos(u.p, chr(10)) > 0 THEN substr(u.p, strpos(u.p, chr(10)) + 1)
                 ELSE '' END, chr(1), ''),
             chr(10) || chr(13) || chr(9) || ' ') AS text
    FROM parts
),
signals AS (
    SELECT
        *,
        lower(coalesce(heading, '')) AS h,
        lower(text) AS t
    FROM sections
),
scored AS (
    SELECT
        name, section_index, heading, text,
        regexp_matches(h, '^(references?|resources|see also|related\b|attribution|licen[cs]e|further reading|credits|acknowledg|changelog|reference (files|documents|materials)|links)')
            AS h_skip,
        regexp_matches(h, '^(when (to|you should|should you|should i|this skill) (use|apply|invoke|load|activates|reach)|when to reach for|use (this|it) when|triggers?\b|trigger conditions|when$|use cases?\b)')
            AND NOT regexp_matches(h, '\bnot\b') AS h_when,
        regexp_matches(h, '(procedure|workflow|steps?\b|step-by-step|instructions|how to|process|method|quick ?start|quick reference|usage|getting started|commands?\b|recipes?|loop|phase|path\b|operations|setup|set up|install|tutorial|walkthrough|cycle|pipeline|flow\b|playbook|routing|examples?\b)')::INT
            AS h_goal,
        regexp_matches(h, '(pitfall|gotcha|caveat|troubleshoot|anti-?pattern|known issues|common (issues|mistakes|errors|problems|failures)|rules?\b|constraint|guardrail|safety|principle|convention|limitation|\bnot\b|\bavoid|don''t|\bnever\b|\bmust\b|red flags|iron law|non-negotiable|mandatory|warning|caution|requirements?\b|prerequisite|best practices|error handling|lessons|contract)')::INT
            AS h_constraints,
        regexp_matches(h, '(verif|validat|checklist|\btest(s|ing)?\b|confirm|success criteria|sanity|audit|how to (check|test|confirm)|quality bar|done when|acceptance|health ?check)')::INT
            AS h_verification,
        len(regexp_extract_all(t, '(?m)^[ \t]*[0-9]+[.)][ \t]+\S'))
        + len(regexp_extract_all(t, '```'))  -- a code block (two fences) counts as two steps: a command to run
        + len(regexp_extract_all(t, '(?m)^[ \t]*(?:[-*+][ \t]+|[0-9]+[.)][ \t]+)?(?:\*\*)?(?:run|use|install|create|open|call|set|add|write|read|start|make|build|copy|clone|edit|pass|load|launch|configure|invoke|execute|fetch|download|upload|search|select|choose|pick|apply|update|deploy|export|import|generate|send|save|enable|define|ask|go|find|list|get|put|type|press|click|navigate|wait|restart|stop|delete|remove|replace|append|prepare|publish|record|follow|draft|plan|identify|review|pull|push|commit|merge|extract|parse|convert|compute|train|evaluate|query|connect|initialize|init|scaffold|summarize|collect|gather|split|then|first|next|finally|step [0-9]+)\b'))
            AS b_goal,
        len(regexp_extract_all(t, '\b(must|never|always|do not|don''t|avoid|should not|shouldn''t|cannot|can''t|won''t|mandatory|required|requires?|forbidden|only (if|when|after)|important|warning|careful|beware|instead of|at most|no more than|not supported|pitfall|gotcha|caveat)\b'))
            AS b_constraints,
        len(regexp_extract_all(t, '\b(verif(y|ied|ies|ication)|validat(e|ed|es|ion|ing)|confirm(s|ed|ing)?|check(s|ed|ing|list)?|asserts?|assertion|expect(ed|s)?|should (see|return|print|show|output|contain|look)|exit code|sanity|health ?check|smoke test|tests? (pass|fail)|passes|passing)\b'))
            AS b_verification
    FROM signals
),
weighted AS (
    SELECT
        *,
        3 * h_goal + b_goal / (b_goal + b_constraints + b_verification + 1) AS s_goal,
        3 * h_constraints + b_constraints / (b_goal + b_constraints + b_verification + 1) AS s_constraints,
        3 * h_verification + b_verification / (b_goal + b_constraints + b_verification + 1) AS s_verification,
        greatest(b_goal, b_constraints, b_verification) >= 3 OR h_goal + h_constraints + h_verification > 0 AS has_signal
    FROM scored
)
SELECT
    name,
    section_index,
    heading,
    text,
    CASE
        WHEN section_index = 0 THEN 'lead'
        WHEN h_skip OR text = '' THEN NULL
        WHEN h_when THEN 'when_to_use'
        WHEN NOT has_signal THEN NULL
        WHEN s_verification > s_goal AND s_verification >= s_constraints THEN 'verification'
        WHEN s_constraints > s_goal THEN 'constraints'
        ELSE 'goal'
    END AS kind,
    b_goal AS goal_signals,
    b_constraints AS constraint_signals,
    b_verification AS verification_signals
FROM weighted
