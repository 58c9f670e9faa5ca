"""skill_to_instruction on the real Hermes skill corpus and on a small fixture: the guide's filter, the same
output from a skills folder and from the lake, and every selected skill converted (section roles read from
the content, not from a fixed list of headings)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.views_helpers import FIXTURE, build_hermes_home, expected_selection, ingest_skills_folder, new_lake
from views.skills import instruction_from_folder

runner = CliRunner()


def app():
    from lachesis.views_cli import _skills_app

    return _skills_app


def jsonl_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hermes")
    truth = build_hermes_home(root / "skills")
    return root / "skills", truth


def test_real_corpus_selects_exactly_agent_skills_used_5_times(corpus):
    skills, truth = corpus
    assert len(truth) > 150  # the vendored hermes-agent corpus, bundled + optional skills
    result, folder = instruction_from_folder(skills)
    assert folder.problems == []
    assert len(folder.skills) == len(truth)
    selected = {c["name"] for c in result.candidates}
    assert selected == expected_selection(truth)
    assert all(truth[n]["provenance"] == "agent" for n in selected)
    # bundled and hub skills with enough uses exist, and are excluded by default
    used = {n for n, t in truth.items() if max(t["use_count"], t["view_count"]) >= 5}
    assert {truth[n]["provenance"] for n in used} >= {"bundled", "hub", "agent"}
    # the old-sidecar fallback matters: some selected skills count only through view_count
    assert any(truth[n]["use_count"] == 0 for n in selected)
    assert {c["uses_source"] for c in result.candidates if truth[c["name"]]["use_count"] == 0} == {"view_count"}
    # every selected skill converts, and yields a goal pair
    assert {c["name"] for c in result.converted} == selected and result.skipped == []
    assert {p["skill"] for p in result.pairs if p["kind"] == "goal"} == selected
    wide, _ = instruction_from_folder(skills, provenance="all")
    assert {c["name"] for c in wide.candidates} == expected_selection(truth, provenance="all")


# The real skills a fixed heading list (Procedure, Workflow, Steps, Instructions, Quick Start, Usage) skipped:
# their goals, constraints and checks sit under other headings ("Operating Loop", "Path 1 ...", "Phase 2 ...",
# "Verification Checklist").
HEADING_LIST_SKIPPED = [
    "3-statement-model", "ascii-art", "bioinformatics", "codebase-inspection", "codex", "excel-author",
    "gif-search", "here.now", "hermes-s6-container-supervision", "himalaya", "llm-wiki", "neuroskill-bci",
    "notion", "obsidian", "ocr-and-documents", "oss-forensics", "page-agent", "pptx-author",
    "requesting-code-review", "research-paper-writing", "shopify", "teams-meeting-pipeline",
    "test-driven-development", "unreal-mcp", "web-pentest"]


def test_every_real_skill_converts_by_content(corpus):
    """Regression: skills without a heading from a fixed list were skipped (19 of 24 selected converted);
    now every selected skill yields instruction data, its sections mapped to goal / constraints /
    verification by what they say."""
    skills, truth = corpus
    result, _ = instruction_from_folder(skills, min_uses=0, provenance="all")
    assert len(result.candidates) == len(truth) and result.skipped == []
    kinds: dict[str, set] = {}
    text: dict[tuple, str] = {}
    for p in result.pairs:
        kinds.setdefault(p["skill"], set()).add(p["kind"])
        text[p["skill"], p["kind"]] = p["messages"][-1]["content"]
    assert set(kinds) == set(truth) and all("goal" in k for k in kinds.values())
    # the skills the heading list skipped: selected, converted, a goal from their own sections (one skill of
    # 177 has none: its goal falls back to the description), and most with constraints or checks as well
    picked = {c["name"]: c for c in result.candidates if c["name"] in HEADING_LIST_SKIPPED}
    assert len(picked) == len(HEADING_LIST_SKIPPED) and all(c["status"] == "ok" for c in picked.values())
    fallback = {c["name"] for c in result.candidates if c["goal_source"] != "sections"}
    assert fallback == {"3-statement-model"} and picked["3-statement-model"]["goal_source"] == "description"
    assert sum(bool(kinds[n] & {"constraints", "verification"}) for n in HEADING_LIST_SKIPPED) >= 20
    for name in ("unreal-mcp", "page-agent", "test-driven-development"):
        assert kinds[name] >= {"goal", "constraints", "verification"}, (name, kinds[name])
    assert "**Inspect first.**" in text["unreal-mcp", "goal"]  # "## Operating Loop": numbered steps
    assert "page-agent.demo.js" in text["page-agent", "goal"]  # "## Path 1 — 30-second demo via CDN"
    assert "Watched each test fail before implementing" in text["test-driven-development", "verification"]
    assert "Inspect first" not in text["unreal-mcp", "verification"]  # one role per section
    assert "Attribution" not in "".join(v for (n, _), v in text.items() if n == "excel-author")

def test_folder_and_lake_give_the_same_files(corpus, tmp_path):
    skills, truth = corpus
    r1 = runner.invoke(app(), ["--skills", str(skills), "--min-uses", "5", "--output", str(tmp_path / "ft_folder")])
    assert r1.exit_code == 0, r1.output
    lake = new_lake(tmp_path / "lake")
    ingest_skills_folder(lake, skills)  # the ingest wing's parser, not views/
    r2 = runner.invoke(app(), ["--lake", str(lake.root), "--min-uses", "5", "--output", str(tmp_path / "ft_lake")])
    assert r2.exit_code == 0, r2.output
    a, b = jsonl_files(tmp_path / "ft_folder"), jsonl_files(tmp_path / "ft_lake")
    assert a and a == b
    assert set(a) == {f"{n}.jsonl" for n in expected_selection(truth)}
    assert json.loads(_summary(skills, tmp_path))["skipped"] == []
    # `cat ft_prompts/*.jsonl > instruction_dataset.jsonl` is a valid dataset
    merged = b"".join(a[k] for k in sorted(a)).decode()
    rows = [json.loads(line) for line in merged.splitlines()]
    assert rows and all([m["role"] for m in r["messages"]] == ["user", "assistant"] for r in rows)
    assert all(r["messages"][1]["content"].strip() for r in rows)
    assert {r["kind"] for r in rows} == {"goal", "when_to_use", "constraints", "verification"}
    assert all(set(m) == {"role", "content"} for r in rows for m in r["messages"])


def _summary(skills: Path, tmp_path: Path) -> str:
    r = runner.invoke(app(), ["--skills", str(skills), "--output", str(tmp_path / "summary"), "--json"])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_fixture_selection_sections_and_summary(tmp_path):
    skills = tmp_path / "skills"
    shutil.copytree(FIXTURE / "skills", skills)
    r = runner.invoke(app(), ["--skills", str(skills), "--output", str(tmp_path / "ft"), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    # gh-helper (bundled, 20 uses), arxiv-hub (hub, 12), rare-skill (agent, 4), old-skill (.archive) are out
    assert s["selected"] == 4 and s["converted"] == 4 and s["skipped"] == []
    assert sorted(s["files"]) == ["deploy-check.jsonl", "fast-serve.jsonl", "python-debug-loop.jsonl",
                                  "quick-notes.jsonl"]
    kinds = {f: [json.loads(x)["kind"] for x in (tmp_path / "ft" / f).read_text().splitlines()] for f in s["files"]}
    assert kinds == {"deploy-check.jsonl": ["goal", "when_to_use", "constraints", "verification"],
                     "fast-serve.jsonl": ["goal", "verification"],
                     "python-debug-loop.jsonl": ["goal", "when_to_use", "constraints"],
                     "quick-notes.jsonl": ["goal"]}
    # quick-notes has no goal sections and no lead: its description is the goal
    notes = json.loads((tmp_path / "ft" / "quick-notes.jsonl").read_text())["messages"]
    assert [m["content"] for m in notes] == ['What is the "quick-notes" skill for, and what does it do?',
                                             "Keep short notes of decisions."]
    first = json.loads((tmp_path / "ft" / "deploy-check.jsonl").read_text().splitlines()[0])
    assert first["skill"] == "deploy-check" and first["category"] == "devops"
    user, answer = first["messages"][0]["content"], first["messages"][1]["content"]
    assert user.startswith("Check a service deployment end to end") and "is it live?" in user
    assert answer.startswith("1. `curl -fsS https://svc/health`")
    dbg = json.loads((tmp_path / "ft" / "python-debug-loop.jsonl").read_text().splitlines()[0])
    assert dbg["messages"][0]["content"].startswith("Use when a pytest failure needs root-causing; reproduce")
    assert "git bisect start" in dbg["messages"][1]["content"]  # a '## ' line in a code fence is not a heading
    r = runner.invoke(app(), ["--skills", str(skills), "--output", str(tmp_path / "ft2")])
    assert r.exit_code == 0 and "converted 4 into 10 pairs" in r.output and "skipped" not in r.output
    # --min-uses and --provenance move the filter
    r = runner.invoke(app(), ["--skills", str(skills), "--output", str(tmp_path / "ft3"), "--json",
                              "--min-uses", "4", "--provenance", "agent,bundled", "--system-prompt", "Be exact."])
    s3 = json.loads(r.stdout)
    assert "rare-skill.jsonl" in s3["files"] and "gh-helper.jsonl" in s3["files"]
    line = json.loads((tmp_path / "ft3" / "gh-helper.jsonl").read_text().splitlines()[0])
    assert line["messages"][0] == {"role": "system", "content": "Be exact."}


def test_bad_input(tmp_path):
    r = runner.invoke(app(), ["--skills", str(tmp_path / "missing"), "--output", str(tmp_path / "o")])
    assert r.exit_code == 2 and "no such folder" in r.output
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x.jsonl").write_text("{}\n")
    r = runner.invoke(app(), ["--skills", str(FIXTURE / "skills"), "--output", str(tmp_path / "o")])
    assert r.exit_code == 2 and "not empty" in r.output and "Traceback" not in r.output
    r = runner.invoke(app(), ["--skills", str(FIXTURE / "skills"), "--output", str(tmp_path / "o"), "--overwrite"])
    assert r.exit_code == 0 and not (tmp_path / "o" / "x.jsonl").exists()


def _one_skill(root: Path, name: str, body: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Ship the {name} app.\n---\n{body}")


def test_roles_come_from_the_content(tmp_path):
    """Headings that name no role: the body decides (steps -> goal, must/never -> constraints, verify/check ->
    verification); prose gets no role; without goal sections the lead is the goal."""
    root = tmp_path / "skills"
    _one_skill(root, "routine", "# Routine\n\n## Daily Routine\n1. Pull the branch.\n2. Build it: `make`.\n"
               "3. Deploy it.\n\n## House Style\nNever push to main. Always run the linter. Don't skip review.\n\n"
               "## Before You Ship\nVerify the build. Check the logs. Confirm the version is the new tag.\n\n"
               "## Background\nThis project began in 2020.\n")
    _one_skill(root, "leady", "# Leady\n\nThe lead paragraph says what this is for.\n\n## Background\nHistory.\n")
    (root / ".usage.json").write_text(json.dumps({"routine": {"use_count": 5}, "leady": {"use_count": 5}}))
    result, _ = instruction_from_folder(root)
    assert {c["name"]: c["goal_source"] for c in result.candidates} == {"leady": "lead", "routine": "sections"}
    pairs = {(p["skill"], p["kind"]): p["messages"][1]["content"] for p in result.pairs}
    assert pairs == {
        ("leady", "goal"): "The lead paragraph says what this is for.",
        ("routine", "goal"): "1. Pull the branch.\n2. Build it: `make`.\n3. Deploy it.",
        ("routine", "constraints"): "Never push to main. Always run the linter. Don't skip review.",
        ("routine", "verification"): "Verify the build. Check the logs. Confirm the version is the new tag.",
    }
    again, _ = instruction_from_folder(root)  # deterministic
    assert again.pairs == result.pairs
