-- Skill effectiveness from the lake, one row per skill (every current skill, and any name trajectories used):
-- the trajectories that used it (skill_uses), their success rate and mean reward, the baseline of the same
-- environments' trajectories without it, and the difference with a confidence interval.
-- Outcome: a trajectory's success, else reward >= `skill_effect_min_reward` (0.5) when only a reward is known
-- (Atropos scores); one with neither counts in `trajectories` only.
-- Baseline, stratified by env (a NULL env is one stratum): every env where the skill was used and trajectories
-- without it exist weighs by the skill's outcomes there, so a skill used mostly in an easy env is compared
-- with that env. compared_* are the skill's figures over those envs; success_diff = compared_success_rate -
-- baseline_success_rate.
-- Intervals (z = `skill_effect_z`, 1.959964 for 95%): success_diff_low/high by Agresti-Caffo (one success and
-- one failure added to each group of each env, Wald interval of the weighted difference); reward_diff_low/high
-- by the normal approximation with each group's own variance (NULL when a group of an env has < 2 rewards);
-- success_rate_low/high: the Wilson score interval of the skill's success rate.
-- order: skill
WITH params AS (
    SELECT
        coalesce(getvariable('skill_effect_min_reward'), 0.5)::DOUBLE AS min_reward,
        coalesce(getvariable('skill_effect_z'), 1.959963984540054)::DOUBLE AS z
),
outcomes AS (
    SELECT trajectory_id, coalesce(env, '') AS env_key, reward::DOUBLE AS reward,
           CAST(coalesce(success, reward >= params.min_reward) AS INTEGER) AS ok
    FROM trajectories_current, params
),
env_totals AS (
    SELECT env_key, count(ok) AS n, coalesce(sum(ok), 0) AS x,
           count(reward) AS rn, coalesce(sum(reward), 0) AS rs, coalesce(sum(reward * reward), 0) AS rq
    FROM outcomes
    GROUP BY env_key
),
with_skill AS (
    SELECT u.skill, o.env_key,
           count(o.ok) AS n1, coalesce(sum(o.ok), 0) AS x1,
           count(o.reward) AS rn1, coalesce(sum(o.reward), 0) AS rs1, coalesce(sum(o.reward * o.reward), 0) AS rq1
    FROM skill_uses u
    JOIN outcomes o ON o.trajectory_id = u.trajectory_id
    GROUP BY u.skill, o.env_key
),
strata AS (
    SELECT w.*, e.n - w.n1 AS n0, e.x - w.x1 AS x0, e.rn - w.rn1 AS rn0, e.rs - w.rs1 AS rs0, e.rq - w.rq1 AS rq0
    FROM with_skill w
    JOIN env_totals e ON e.env_key = w.env_key
),
rates AS (
    SELECT
        *,
        n1 > 0 AND n0 > 0 AS cmp,
        rn1 > 0 AND rn0 > 0 AS rcmp,
        CASE WHEN n0 > 0 THEN x0 / n0 END AS p0,
        (x1 + 1) / (n1 + 2) AS a1,
        (x0 + 1) / (n0 + 2) AS a0,
        CASE WHEN rn1 > 0 THEN rs1 / rn1 END AS m1,
        CASE WHEN rn0 > 0 THEN rs0 / rn0 END AS m0,
        CASE WHEN rn1 > 1 THEN greatest(rq1 - rs1 * rs1 / rn1, 0) / (rn1 - 1) END AS v1,
        CASE WHEN rn0 > 1 THEN greatest(rq0 - rs0 * rs0 / rn0, 0) / (rn0 - 1) END AS v0
    FROM strata
),
per_skill AS (
    SELECT
        skill,
        sum(n1)::BIGINT AS outcomes,
        sum(x1)::BIGINT AS successes,
        sum(rn1)::BIGINT AS rewards,
        sum(rs1) AS reward_sum,
        sum(n1) FILTER (WHERE cmp)::BIGINT AS cmp_n,
        sum(x1) FILTER (WHERE cmp)::BIGINT AS cmp_x,
        sum(n0) FILTER (WHERE cmp)::BIGINT AS baseline_outcomes,
        sum(n1 * p0) FILTER (WHERE cmp) AS w_p0,
        sum(n1 * (a1 - a0)) FILTER (WHERE cmp) AS w_adiff,
        sum(n1 * n1 * (a1 * (1 - a1) / (n1 + 2) + a0 * (1 - a0) / (n0 + 2))) FILTER (WHERE cmp) AS w2_avar,
        sum(rn1) FILTER (WHERE rcmp)::BIGINT AS cmp_rn,
        sum(rn1 * m1) FILTER (WHERE rcmp) AS w_m1,
        sum(rn1 * m0) FILTER (WHERE rcmp) AS w_m0,
        sum(rn0) FILTER (WHERE rcmp)::BIGINT AS baseline_rewards,
        sum(rn1 * rn1 * (v1 / rn1 + v0 / rn0)) FILTER (WHERE rcmp) AS w2_rvar,
        bool_and(v1 IS NOT NULL AND v0 IS NOT NULL) FILTER (WHERE rcmp) AS rvar_known
    FROM rates
    GROUP BY skill
),
use_facts AS (
    SELECT skill, count(*) AS trajectories, list_sort(list_distinct(list(env))) AS envs,
           list_sort(list_distinct(flatten(list(sources)))) AS sources,
           min(occurred_at) AS first_used_at, max(occurred_at) AS last_used_at
    FROM skill_uses
    GROUP BY skill
),
names AS (
    SELECT name AS skill FROM skills_current
    UNION
    SELECT skill FROM use_facts
),
est AS (
    SELECT
        names.skill,
        coalesce(f.trajectories, 0) AS trajectories,
        f.envs, f.sources, f.first_used_at, f.last_used_at,
        coalesce(p.outcomes, 0) AS outcomes,
        coalesce(p.successes, 0) AS successes,
        p.successes / nullif(p.outcomes, 0) AS success_rate,
        p.reward_sum / nullif(p.rewards, 0) AS mean_reward,
        coalesce(p.cmp_n, 0) AS compared_outcomes,
        p.cmp_x / p.cmp_n AS compared_success_rate,
        coalesce(p.baseline_outcomes, 0) AS baseline_outcomes,
        p.w_p0 / p.cmp_n AS baseline_success_rate,
        p.w_adiff / p.cmp_n AS adiff,
        sqrt(p.w2_avar) / p.cmp_n AS ase,
        p.w_m1 / p.cmp_rn AS compared_mean_reward,
        coalesce(p.baseline_rewards, 0) AS baseline_rewards,
        p.w_m0 / p.cmp_rn AS baseline_mean_reward,
        CASE WHEN p.rvar_known THEN sqrt(p.w2_rvar) / p.cmp_rn END AS rse,
        params.z
    FROM names
    LEFT JOIN use_facts f ON f.skill = names.skill
    LEFT JOIN per_skill p ON p.skill = names.skill
    CROSS JOIN params
)
SELECT
    est.skill,
    sc.provenance,
    sc.category,
    sc.updated_at,
    st.uses AS sidecar_uses,
    est.trajectories,
    est.envs,
    est.sources,
    est.first_used_at,
    est.last_used_at,
    est.outcomes,
    est.successes,
    est.success_rate,
    CASE WHEN outcomes > 0 THEN greatest(0.0,
        (success_rate + z * z / (2 * outcomes) - z * sqrt(success_rate * (1 - success_rate) / outcomes + z * z / (4 * outcomes * outcomes)))
        / (1 + z * z / outcomes)) END AS success_rate_low,
    CASE WHEN outcomes > 0 THEN least(1.0,
        (success_rate + z * z / (2 * outcomes) + z * sqrt(success_rate * (1 - success_rate) / outcomes + z * z / (4 * outcomes * outcomes)))
        / (1 + z * z / outcomes)) END AS success_rate_high,
    est.mean_reward,
    est.compared_outcomes,
    est.compared_success_rate,
    est.baseline_outcomes,
    est.baseline_success_rate,
    compared_success_rate - baseline_success_rate AS success_diff,
    CASE WHEN ase IS NOT NULL THEN greatest(-1.0, adiff - z * ase) END AS success_diff_low,
    CASE WHEN ase IS NOT NULL THEN least(1.0, adiff + z * ase) END AS success_diff_high,
    est.compared_mean_reward,
    est.baseline_rewards,
    est.baseline_mean_reward,
    compared_mean_reward - baseline_mean_reward AS reward_diff,
    compared_mean_reward - baseline_mean_reward - z * rse AS reward_diff_low,
    compared_mean_reward - baseline_mean_reward + z * rse AS reward_diff_high
FROM est
LEFT JOIN skills_current sc ON sc.name = est.skill
LEFT JOIN skill_stats st ON st.name = est.skill
