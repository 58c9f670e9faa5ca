"""skill_to_instruction on the real Hermes skill corpus and on a small fixture: the guide's filter, the same
output from a skills folder and from the lake, and skipped skills reported with a reason."""
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
    # every selected skill is either converted or skipped with a reason
    assert {c["name"] for c in result.converted} | {c["name"] for c in result.skipped} == selected
    assert all(c["reason"] for c in result.skipped)
    assert {p["skill"] for p in result.pairs} == {c["name"] for c in result.converted}
    wide, _ = instruction_from_folder(skills, provenance="all")
    assert {c["name"] for c in wide.candidates} == expected_selection(truth, provenance="all")


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
    assert set(a) == {f"{n}.jsonl" for n in expected_selection(truth)} - {
        f"{s['skill']}.jsonl" for s in json.loads(_summary(skills, tmp_path))["skipped"]}
    # `cat ft_prompts/*.jsonl > instruction_dataset.jsonl` is a valid dataset
    merged = b"".join(a[k] for k in sorted(a)).decode()
    rows = [json.loads(line) for line in merged.splitlines()]
    assert rows and all([m["role"] for m in r["messages"]] == ["user", "assistant"] for r in rows)
    assert all(r["messages"][1]["content"].strip() for r in rows)
    assert {r["kind"] for r in rows} <= {"procedure", "when_to_use", "pitfalls", "verification"}
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
    assert s["selected"] == 4 and s["converted"] == 3
    assert s["skipped"] == [{"skill": "quick-notes", "reason":
                             "no procedure section (## Procedure, Workflow, Steps, Instructions, Quick Start or Usage); "
                             "sections: Overview, Notes"}]
    assert sorted(s["files"]) == ["deploy-check.jsonl", "fast-serve.jsonl", "python-debug-loop.jsonl"]
    kinds = {f: [json.loads(x)["kind"] for x in (tmp_path / "ft" / f).read_text().splitlines()] for f in s["files"]}
    assert kinds == {"deploy-check.jsonl": ["procedure", "when_to_use", "pitfalls", "verification"],
                     "fast-serve.jsonl": ["procedure", "verification"],
                     "python-debug-loop.jsonl": ["procedure", "when_to_use", "pitfalls"]}
    first = json.loads((tmp_path / "ft" / "deploy-check.jsonl").read_text().splitlines()[0])
    assert first["skill"] == "deploy-check" and first["category"] == "devops"
    user, answer = first["messages"][0]["content"], first["messages"][1]["content"]
    assert user.startswith("Check a service deployment end to end") and "is it live?" in user
    assert answer.startswith("1. `curl -fsS https://svc/health`")
    dbg = json.loads((tmp_path / "ft" / "python-debug-loop.jsonl").read_text().splitlines()[0])
    assert dbg["messages"][0]["content"].startswith("Use when a pytest failure needs root-causing; reproduce")
    assert "git bisect start" in dbg["messages"][1]["content"]  # a '## ' line in a code fence is not a heading
    # the human-readable summary names the skipped skill and why
    r = runner.invoke(app(), ["--skills", str(skills), "--output", str(tmp_path / "ft2")])
    assert r.exit_code == 0 and "quick-notes" in r.output and "no procedure section" in r.output
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
