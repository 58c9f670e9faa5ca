"""Skill effectiveness from the lake (views skill_uses, skill_effect) and skill_to_instruction's recent /
proven-effective filters (--since, --now, --min-success, --min-lift), on real lake rows: native records, a
Hermes ShareGPT record through the ingest parser, a late reward label; trajectories that do and do not use
skills. The figures are checked against a computation written out here in Python."""
from __future__ import annotations

import json
import math
from statistics import NormalDist

import pytest
from typer.testing import CliRunner

from ingest.hermes import hermes_to_record
from tests.views_helpers import new_lake

runner = CliRunner()
NOW = "2026-06-01T00:00:00Z"
SKILL_BODY = ("# {name}\n\n## Procedure\n1. Run `make {name}`.\n2. Check the output.\n\n"
              "## Pitfalls\nNever skip the check.\n")


def app():
    from lachesis.views_cli import _skills_app

    return _skills_app


def _use_messages(skill: str, how: str, i: int) -> list[dict]:
    """The ways Hermes shows a skill's use (docs: views/skill_uses.sql), plus tool noise."""
    system = "You are a shell agent. Skills available: deploy-check, flaky-fix, easy-skill."  # an index is no use
    user = f"task {i}"
    msgs: list[dict] = []
    if how == "preload":
        system += (f'\n\n[SYSTEM: The user launched this CLI session with the "{skill}" skill preloaded. Treat its '
                   "instructions as active guidance for the duration of this session unless the user overrides them.]")
    elif how == "slash":
        user = (f'[SYSTEM: The user has invoked the "{skill}" skill, indicating they want you to follow its '
                f"instructions. The full skill content is loaded below.]\n\n# {skill}\n\n{user}")
    elif how == "bundle":
        user = ('[IMPORTANT: The user has invoked the "/ops" stacked skill bundle, loading 1 skills together.]\n\n'
                f'[Loaded as part of the stacked skill invocation "{skill}".]\n# {skill}\n\n{user}')
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if how == "skill_view":
        msgs += [{"role": "assistant", "content": "", "tool_calls": [
                     {"id": "c1", "name": "skill_view", "arguments": {"name": skill}}]},
                 {"role": "tool", "tool_call_id": "c1", "name": "skill_view",
                  "content": json.dumps({"success": True, "name": skill, "content": "..."})}]
    msgs += [{"role": "assistant", "content": "", "tool_calls": [
                 {"id": "c2", "name": "terminal", "arguments": {"command": f"make {i}"}}]},
             {"role": "tool", "tool_call_id": "c2", "name": "terminal", "content": "ok"},
             {"role": "assistant", "content": "done"}]
    return msgs


def _failed_view_messages(skill: str) -> list[dict]:
    """A skill_view of a skill that is not there: Hermes answers success false, and that is no use."""
    return [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c9", "name": "skill_view", "arguments": {"name": skill}}]},
            {"role": "tool", "tool_call_id": "c9", "name": "skill_view",
             "content": json.dumps({"success": False, "error": f"Skill '{skill}' not found."})},
            {"role": "assistant", "content": "gave up"}]


# (env, skill or None, how, successes, failures): each row is that many trajectories.
PLAN = [
    ("bash_exec", "deploy-check", "skill_view", 4, 1),
    ("bash_exec", "deploy-check", "preload", 2, 0),
    ("bash_exec", "deploy-check", "slash", 1, 0),
    ("bash_exec", "deploy-check", "bundle", 0, 1),
    ("bash_exec", "deploy-check", "metadata", 1, 0),
    ("bash_exec", "flaky-fix", "skill_view", 3, 7),
    ("bash_exec", None, None, 9, 11),
    ("python_debug", "deploy-check", "skill_view", 4, 0),
    ("python_debug", "old-trick", "skill_view", 5, 0),
    ("python_debug", None, None, 2, 4),
    ("trivia", "easy-skill", "skill_view", 9, 1),
    ("trivia", None, None, 10, 0),
]


def build_records() -> tuple[list[dict], dict[str, set[str]]]:
    """Native trajectory records for PLAN; returns them and {skill: trajectory ids that used it}."""
    recs, uses = [], {}
    i = 0
    for env, skill, how, ok, bad in PLAN:
        for k in range(ok + bad):
            i += 1
            success = k < ok
            tid = f"t{i:03d}"
            rec = {"trajectory_id": tid, "env": env, "task_id": f"{env}-{i % 4}", "success": success,
                   "reward": 1.0 if success else round(0.1 * (k % 3), 1),
                   "occurred_at": f"2026-05-{10 + i % 15:02d}T00:00:00Z"}
            if skill is None:
                rec["messages"] = _failed_view_messages("no-such-skill") if k == 0 else _use_messages("", "", i)
            else:
                rec["messages"] = _use_messages(skill, how, i)
                if how == "metadata":
                    rec["metadata"] = {"skills_used": [skill]}
                uses.setdefault(skill, set()).add(tid)
            recs.append(rec)
    return recs, uses


def hermes_records() -> list[dict]:
    """Two Hermes batch records through the ingest parser: one views the skill by its path form."""
    def record(i: int, view: bool) -> dict:
        conv = [{"from": "system", "value": "You are a function calling AI model."},
                {"from": "human", "value": f"deploy service {i}"}]
        if view:
            conv += [{"from": "gpt", "value": '<think>\n</think>\n<tool_call>\n{"name": "skill_view", "arguments": '
                                              '{"name": "devops/deploy-check"}}\n</tool_call>'},
                     {"from": "tool", "value": '<tool_response>\n{"tool_call_id": "call_0", "name": "skill_view", '
                                               '"content": {"success": true, "name": "deploy-check"}}'
                                               '\n</tool_response>'}]
        conv.append({"from": "gpt", "value": "<think>\n</think>\nDeployed."})
        return {"prompt_index": i, "conversations": conv, "completed": True,
                "metadata": {"batch_num": 0, "timestamp": "2026-05-20T10:00:00", "model": "hermes-3"}}

    return [hermes_to_record(record(0, True)), hermes_to_record(record(1, False))]


SKILLS = {  # name: (version time, sidecar use_count)
    "deploy-check": ("2026-05-20T00:00:00Z", 6),
    "flaky-fix": ("2026-05-25T00:00:00Z", 9),
    "old-trick": ("2026-02-01T00:00:00Z", 7),
    "easy-skill": ("2026-05-28T00:00:00Z", 8),
    "unused": ("2026-05-30T00:00:00Z", 5),
    "rare": ("2026-05-30T00:00:00Z", 2),
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return filled_lake(tmp_path_factory.mktemp("effect") / "lake")


@pytest.fixture
def own_lake(tmp_path):
    """The same lake, for a test that appends to it."""
    return filled_lake(tmp_path / "own_lake")


def filled_lake(root):
    lk = new_lake(root)
    recs, uses = build_records()
    hermes = hermes_records()
    lk.append("trajectories", recs + hermes)
    # Hermes records carry no outcome: late labels (the rewards table) give them one
    lk.append("rewards", [{"trajectory_id": hermes[0]["trajectory_id"], "success": True, "reward": 1.0},
                          {"trajectory_id": hermes[1]["trajectory_id"], "success": False, "reward": 0.0}])
    lk.append("skills", [{"name": n, "category": "devops", "provenance": "agent", "description": f"The {n} skill.",
                          "body": SKILL_BODY.format(name=n), "occurred_at": at} for n, (at, _) in SKILLS.items()])
    lk.append("skill_usage", [{"name": n, "use_count": c} for n, (_, c) in SKILLS.items()])
    outcomes = [(r["trajectory_id"], r["env"], r["success"], r["reward"]) for r in recs]
    outcomes += [(hermes[0]["trajectory_id"], "hermes", True, 1.0), (hermes[1]["trajectory_id"], "hermes", False, 0.0)]
    uses["deploy-check"].add(hermes[0]["trajectory_id"])
    lk.expected = outcomes, uses
    return lk


# -- the figures, written out ----------------------------------------------------------------------------------
def wilson(x: int, n: int, z: float) -> tuple[float, float]:
    p = x / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def expected_effect(outcomes, used: set[str], z: float) -> dict:
    envs = sorted({e for t, e, _, _ in outcomes if t in used})
    strata = []
    for env in envs:
        with_ = [(ok, r) for t, e, ok, r in outcomes if e == env and t in used]
        without = [(ok, r) for t, e, ok, r in outcomes if e == env and t not in used]
        strata.append((with_, without))
    n1 = sum(len(w) for w, _ in strata)
    x1 = sum(ok for w, _ in strata for ok, _ in w)
    comparable = [(w, o) for w, o in strata if w and o]
    n = sum(len(w) for w, _ in comparable)
    diff_adj, var, base, rdiff = 0.0, 0.0, 0.0, 0.0
    rvar: float | None = 0.0
    for w, o in comparable:
        k = len(w) / n
        a1 = (sum(ok for ok, _ in w) + 1) / (len(w) + 2)
        a0 = (sum(ok for ok, _ in o) + 1) / (len(o) + 2)
        diff_adj += k * (a1 - a0)
        var += k * k * (a1 * (1 - a1) / (len(w) + 2) + a0 * (1 - a0) / (len(o) + 2))
        base += k * sum(ok for ok, _ in o) / len(o)
        m1, m0 = (sum(r for _, r in g) / len(g) for g in (w, o))
        rdiff += k * (m1 - m0)
        if rvar is not None and min(len(w), len(o)) > 1:
            v1, v0 = (sum((r - m) ** 2 for _, r in g) / (len(g) - 1) for g, m in ((w, m1), (o, m0)))
            rvar += k * k * (v1 / len(w) + v0 / len(o))
        else:  # a group of one has no variance: no interval
            rvar = None
    compared = sum(ok for w, _ in comparable for ok, _ in w) / n
    low, high = wilson(x1, n1, z)
    return {"trajectories": len(used), "outcomes": n1, "successes": x1, "success_rate": x1 / n1,
            "success_rate_low": low, "success_rate_high": high, "compared_outcomes": n,
            "compared_success_rate": compared, "baseline_success_rate": base, "success_diff": compared - base,
            "success_diff_low": max(-1.0, diff_adj - z * math.sqrt(var)),
            "success_diff_high": min(1.0, diff_adj + z * math.sqrt(var)),
            "reward_diff": rdiff, "reward_diff_low": None if rvar is None else rdiff - z * math.sqrt(rvar),
            "reward_diff_high": None if rvar is None else rdiff + z * math.sqrt(rvar)}


def test_skill_uses_reads_every_hermes_form(lake):
    outcomes, uses = lake.expected
    with lake.snapshot() as snap:
        rows = snap.arrow("SELECT trajectory_id, skill, sources FROM skill_uses").to_pylist()
    got: dict[str, set[str]] = {}
    for r in rows:
        got.setdefault(r["skill"], set()).add(r["trajectory_id"])
    assert got == uses  # no-such-skill (a failed skill_view) and the skills index in the prompt are no use
    sources = {s for r in rows if r["skill"] == "deploy-check" for s in r["sources"]}
    assert sources == {"skill_view", "preload", "slash", "bundle", "metadata"}
    hermes = [r for r in rows if r["trajectory_id"].startswith("hermes-")]
    assert [(r["skill"], r["sources"]) for r in hermes] == [("deploy-check", ["skill_view"])]  # "devops/deploy-check"


def test_skill_effect_matches_the_written_out_figures(lake):
    outcomes, uses = lake.expected
    z = NormalDist().inv_cdf(0.975)
    with lake.snapshot() as snap:
        rows = {r["skill"]: r for r in snap.arrow("SELECT * FROM skill_effect").to_pylist()}
    assert set(rows) == set(SKILLS)
    for skill, used in uses.items():
        want = expected_effect(outcomes, used, z)
        for key, value in want.items():
            assert rows[skill][key] == (None if value is None else pytest.approx(value, abs=1e-9)), (skill, key)
    dc = rows["deploy-check"]
    assert dc["envs"] == ["bash_exec", "hermes", "python_debug"] and dc["sidecar_uses"] == 6
    assert dc["success_diff_low"] > 0  # better than the same envs without it, at 95%
    easy = rows["easy-skill"]
    assert easy["success_rate"] == 0.9 and easy["baseline_success_rate"] == 1.0 and easy["success_diff_low"] < 0
    flaky = rows["flaky-fix"]
    assert flaky["success_rate"] == 0.3 and flaky["success_diff"] < 0
    old = rows["old-trick"]  # every trajectory succeeded: the Wilson interval still has width
    assert old["success_rate"] == 1.0 and old["success_rate_low"] < 0.6
    assert old["success_rate_high"] == pytest.approx(1.0)
    unused = rows["unused"]
    assert (unused["trajectories"], unused["outcomes"], unused["success_rate"], unused["success_diff_low"]) == \
        (0, 0, None, None)


def test_skill_uses_kept_once_is_what_every_later_query_of_the_connection_reads(lake):
    """keep_skill_uses (the skills page and skill_to_instruction compute skill_uses once per connection): a temp
    table with the view's rows, which skill_effect and the instruction views then read instead of the view."""
    from views.skills import keep_skill_uses

    with lake.snapshot() as snap:
        uses = snap.arrow("SELECT * FROM skill_uses ORDER BY trajectory_id, skill").to_pylist()
        effect = snap.arrow("SELECT * FROM skill_effect ORDER BY skill").to_pylist()
        keep_skill_uses(snap.con)
        keep_skill_uses(snap.con)  # a second call keeps the first table
        kept = "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'skill_uses'"
        assert snap.con.sql(kept).fetchall() == [(1,)]
        assert snap.arrow("SELECT * FROM skill_uses ORDER BY trajectory_id, skill").to_pylist() == uses
        again = snap.arrow("SELECT * FROM skill_effect ORDER BY skill").to_pylist()
        assert [r.keys() for r in again] == [r.keys() for r in effect]
        for a, b in zip(again, effect):  # sums over the rows in another order: the last bits of a float may differ
            assert {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in a.items()} == b
        snap.con.execute("DELETE FROM temp.skill_uses WHERE skill = 'deploy-check'")  # the views read the table
        row = snap.arrow("SELECT trajectories FROM skill_effect WHERE skill = 'deploy-check'").to_pylist()
        assert row == [{"trajectories": 0}] and effect[[r["skill"] for r in effect].index("deploy-check")]["trajectories"] > 0
    with lake.snapshot() as snap:  # another connection never sees it
        assert snap.arrow("SELECT * FROM skill_uses ORDER BY trajectory_id, skill").to_pylist() == uses


def test_reward_only_trajectories_and_interval_width(tmp_path):
    """Atropos-style rows with a reward and no success count as success when reward >= skill_effect_min_reward;
    a wider confidence level gives a wider interval."""
    lk = new_lake(tmp_path / "lake")
    recs = []
    for i in range(12):
        used = i < 6
        msgs = _use_messages("scorer", "skill_view", i) if used else _use_messages("", "", i)
        recs.append({"trajectory_id": f"r{i}", "env": "math", "messages": msgs,
                     "reward": [0.9, 0.8, 0.7, 0.6, 0.2, 0.9, 0.1, 0.2, 0.6, 0.3, 0.4, 0.0][i]})
    lk.append("trajectories", recs)
    with lk.snapshot() as snap:
        r = snap.arrow("SELECT * FROM skill_effect").to_pylist()[0]
        assert (r["skill"], r["outcomes"], r["successes"]) == ("scorer", 6, 5)
        assert r["baseline_success_rate"] == pytest.approx(1 / 6)
        snap.con.execute("SET VARIABLE skill_effect_min_reward = 0.75")
        snap.con.execute(f"SET VARIABLE skill_effect_z = {NormalDist().inv_cdf(0.995)}")
        r99 = snap.arrow("SELECT * FROM skill_effect").to_pylist()[0]
    assert r99["successes"] == 3 and r99["baseline_success_rate"] == 0.0
    outcomes = [(x["trajectory_id"], "math", x["reward"] >= 0.75, x["reward"]) for x in recs]
    want = expected_effect(outcomes, {f"r{i}" for i in range(6)}, NormalDist().inv_cdf(0.995))
    assert r99["success_diff_low"] == pytest.approx(want["success_diff_low"])
    assert r99["reward_diff_high"] - r99["reward_diff_low"] > r["reward_diff_high"] - r["reward_diff_low"]


def _run(lake, tmp_path, name: str, *args: str) -> dict:
    out = tmp_path / name
    r = runner.invoke(app(), ["--lake", str(lake.root), "--output", str(out), "--json", *args])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    summary["manifest"] = json.loads((out / "manifest.json").read_text())
    return summary


def test_skill_to_instruction_selects_recent_proven_skills(own_lake, tmp_path):
    lake = own_lake
    plain = _run(lake, tmp_path, "plain", "--min-uses", "5")
    assert sorted(plain["files"]) == ["deploy-check.jsonl", "easy-skill.jsonl", "flaky-fix.jsonl",
                                      "old-trick.jsonl", "unused.jsonl"]
    recent = _run(lake, tmp_path, "recent", "--since", "30d", "--now", NOW)
    assert sorted(recent["files"]) == ["deploy-check.jsonl", "easy-skill.jsonl", "flaky-fix.jsonl", "unused.jsonl"]
    proven = _run(lake, tmp_path, "proven", "--since", "30d", "--now", NOW, "--min-success", "0.6")
    assert sorted(proven["files"]) == ["deploy-check.jsonl", "easy-skill.jsonl"]
    lifted = _run(lake, tmp_path, "lifted", "--since", "30d", "--now", NOW, "--min-success", "0.6",
                  "--min-lift", "0")
    assert lifted["files"] == ["deploy-check.jsonl"]
    m = lifted["manifest"]
    assert m["filters"] == {"min_uses": 5, "provenance": "agent", "since": "30d", "now": "2026-06-01T00:00:00+00:00",
                            "since_at": "2026-05-02T00:00:00+00:00", "min_success": 0.6, "min_lift": 0.0,
                            "confidence": 0.95, "system_prompt": None}
    assert m["source"]["lake_versions"] == {t: lake.version(t) for t in sorted(lake.tables())}
    ev = m["evidence"]["deploy-check"]
    assert (ev["uses"], ev["trajectories"], ev["version_at"]) == (6, 15, "2026-05-20T00:00:00+00:00")
    assert ev["success_rate"] == pytest.approx(13 / 15) and ev["success_diff_low"] > 0
    # new trajectories change the evidence; --as-of the earlier output folder (with --now) reproduces it
    lake.append("trajectories", [{"trajectory_id": f"late-{i}", "env": "bash_exec", "success": False,
                                  "messages": _use_messages("deploy-check", "skill_view", i)} for i in range(30)])
    moved = _run(lake, tmp_path, "moved", "--since", "30d", "--now", NOW, "--min-success", "0.6", "--min-lift", "0")
    assert moved["files"] == []
    again = _run(lake, tmp_path, "again", "--since", "30d", "--now", NOW, "--min-success", "0.6", "--min-lift", "0",
                 "--as-of", str(tmp_path / "lifted"))
    assert again["manifest"] == m
    same = [(tmp_path / d / "deploy-check.jsonl").read_bytes() for d in ("again", "lifted")]
    assert same[0] == same[1]
    # the same filters on a later clock: deploy-check's version falls out of a 10-day window
    later = _run(lake, tmp_path, "later", "--since", "10d", "--now", "2026-06-01T00:00:00Z", "--min-success", "0.6")
    assert later["files"] == ["easy-skill.jsonl"]
    # an absolute start works as well
    fixed = _run(lake, tmp_path, "fixed", "--since", "2026-05-26", "--min-success", "0.6")
    assert fixed["files"] == ["easy-skill.jsonl"] and fixed["filters"]["since_at"] == "2026-05-26T00:00:00+00:00"


@pytest.mark.parametrize("args, message", [
    (["--since", "30 days"], "--since takes a duration"),
    (["--now", "yesterday", "--since", "1d"], "--now takes an ISO date"),
    (["--min-success", "1.5"], "--min-success must be between 0 and 1"),
    (["--confidence", "1"], "--confidence must be between 0 and 1"),
    (["--provenance", "agents"], "--provenance takes agent, bundled, hub"),
])
def test_bad_filters_are_one_line_errors(lake, tmp_path, args, message):
    r = runner.invoke(app(), ["--lake", str(lake.root), "--output", str(tmp_path / "o"), *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_folder_source_refuses_lake_only_filters(tmp_path):
    (tmp_path / "skills").mkdir()
    r = runner.invoke(app(), ["--skills", str(tmp_path / "skills"), "--output", str(tmp_path / "o"),
                              "--min-success", "0.6", "--since", "30d"])
    assert r.exit_code == 2 and "--since, --min-success read the lake" in r.output
