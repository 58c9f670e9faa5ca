"""Strategy 4 out of the box (issue 27 item 3): `lake samples skills DIR` lays the shipped skills out as an agent's
own with sample use counts, `skill_to_instruction` with no options reads the default lake (or
$HERMES_HOME/skills) into ft_prompts/, and on the skills as Hermes installs them it says why it selected none."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from ingest.samples import sample_usage
from lachesis.cli import app as lake_app

runner = CliRunner()


def skills_app():
    from lachesis.views_cli import _skills_app

    return _skills_app


def test_sample_skills_select_by_the_guides_filter_end_to_end(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(lake_app, ["samples", "skills", "skills", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["skills"] == 179  # the corpus and the 2 web-form skills
    usage = json.loads((tmp_path / "skills" / ".usage.json").read_text())
    assert len(usage) == 179 and all(r["created_by"] == "agent" and r["sample"] for r in usage.values())
    expected = sorted(n for n in usage if sample_usage(n)["use_count"] >= 5)
    assert 60 < len(expected) < 179  # the filter keeps some and drops some
    res = runner.invoke(skills_app(), ["--skills", "skills", "--json"])  # default output: ft_prompts/
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["selected"] == len(expected) and summary["converted"] == len(expected)
    assert summary["why_none"] == "" and summary["output"] == "ft_prompts"
    files = sorted((tmp_path / "ft_prompts").glob("*.jsonl"))
    assert len(files) == len(expected)
    first = json.loads(files[0].read_text().splitlines()[0])
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    # the web-form skills (ingest/data/skills) reach instruction data with their own steps
    assert (tmp_path / "skills" / "web-forms" / "fill-web-form" / "SKILL.md").is_file()
    goal = next(json.loads(x) for x in (tmp_path / "ft_prompts" / "fill-web-form.jsonl").read_text().splitlines()
                if json.loads(x)["kind"] == "goal")
    assert "type(ref, text)" in goal["messages"][-1]["content"]
    # a non-empty folder is refused, nothing overwritten
    again = runner.invoke(lake_app, ["samples", "skills", "skills"])
    assert again.exit_code == 2 and "not an empty folder" in again.output


def test_installed_layout_says_why_nothing_was_selected_and_how_to_try(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(lake_app, ["samples", "skills", "hermes", "--as-installed"]).exit_code == 0
    res = runner.invoke(skills_app(), ["--skills", "hermes"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "selected 0 skills" in out
    assert "none of the 177 skills" in out and "bundled" in out and "hub" in out
    assert "lake samples skills skills/" in out


def test_no_options_reads_the_default_lake_else_hermes_home_else_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKE_ROOT", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes_home"))
    res = runner.invoke(skills_app(), [])
    assert res.exit_code == 2
    assert "no lake at data/lake" in res.output and "lake samples skills" in res.output
    assert runner.invoke(lake_app, ["samples", "skills", str(tmp_path / "hermes_home" / "skills")]).exit_code == 0
    res = runner.invoke(skills_app(), ["--json"])  # $HERMES_HOME/skills, since there is no lake
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["source"].endswith("hermes_home/skills") and json.loads(res.output)["selected"] > 0
    assert runner.invoke(lake_app, ["init"]).exit_code == 0  # ./data/lake now holds a lake: it wins
    res = runner.invoke(skills_app(), ["--json", "--output", "from_lake"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["source"] == "data/lake" and summary["selected"] == 0
    assert summary["why_none"] == "there are no skills"
