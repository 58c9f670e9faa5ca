"""One SKILL.md reader (lake.skill_files): `lake watch` (ingest) and skill_to_instruction's folder reader (views)
see the same skills in the same folder, edge cases included; the watcher, the server and skills_current.sql
take the same version of a skill as its latest."""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from ingest.config import ServeConfig
from ingest.state import IngestState
from ingest.watch import Watcher
from lake import Lake
from lake.skill_files import SkillFileError, read_skill_file, read_skills
from views.skills import read_hermes_folder

SKILLS = {
    # flat, named in its frontmatter
    "flat-one/SKILL.md": "---\nname: flat-one\ndescription: A flat skill.\n---\n# Flat\n## Procedure\n1. go\n",
    # flat, with its category in the frontmatter
    "flat-cat/SKILL.md": "---\nname: flat-cat\ndescription: d\ncategory: tools\n---\nbody\n",
    # <category>/<name>
    "devops/deploy/SKILL.md": "---\nname: deploy\ndescription: Deploy it.\n---\nsteps\n",
    # <category>/<sub>/<name>: the category is the first part; the frontmatter name differs from the folder
    "mlops/inference/vllm/SKILL.md": "---\nname: serving-llms-vllm\ndescription: vLLM.\n---\nserve\n",
    # invalid YAML with a `name:` line: the line scan finds it
    "misc/badyaml/SKILL.md": "---\nname: yaml-broken\ndescription: [unclosed\n  - : :\n---\nbody\n",
    # invalid YAML and no name: the folder names it
    "misc/badyaml-noname/SKILL.md": "---\ndescription: [unclosed\n  - : :\n---\nbody\n",
    # valid YAML without a name: the folder names it
    "misc/noname/SKILL.md": "---\ndescription: no name here\n---\nbody\n",
    # YAML that is not a mapping: line scan (finds nothing), the folder names it
    "misc/listfm/SKILL.md": "---\n- a\n- b\n---\nbody\n",
    # a second skill called "deploy": the first in walk order wins (devops/ before zz/)
    "zz/deploy-copy/SKILL.md": "---\nname: deploy\ndescription: other\n---\nother\n",
    # refused
    "bad/nofm/SKILL.md": "# Title only\n",
    "bad/emptybody/SKILL.md": "---\nname: emptybody\n---\n\n",
    "bad/traversal/SKILL.md": "---\nname: ../../etc\n---\nbody\n",
    # skipped folders
    ".archive/old/SKILL.md": "---\nname: old\n---\nbody\n",
    "node_modules/x/SKILL.md": "---\nname: x\n---\nbody\n",
}
ACCEPTED = {  # name -> (category, path)
    "flat-one": (None, "flat-one/SKILL.md"),
    "flat-cat": ("tools", "flat-cat/SKILL.md"),
    "deploy": ("devops", "devops/deploy/SKILL.md"),
    "serving-llms-vllm": ("mlops", "mlops/inference/vllm/SKILL.md"),
    "yaml-broken": ("misc", "misc/badyaml/SKILL.md"),
    "badyaml-noname": ("misc", "misc/badyaml-noname/SKILL.md"),
    "noname": ("misc", "misc/noname/SKILL.md"),
    "listfm": ("misc", "misc/listfm/SKILL.md"),
}
REFUSED = {"zz/deploy-copy/SKILL.md": "duplicate", "bad/nofm/SKILL.md": "does not start",
           "bad/emptybody/SKILL.md": "empty body", "bad/traversal/SKILL.md": "not allowed"}


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "skills"
    for rel, text in SKILLS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / ".bundled_manifest").write_text("flat-one:0\n", encoding="utf-8")
    (root / ".hub").mkdir()
    (root / ".hub" / "lock.json").write_text(json.dumps({"installed": {"vllm": {"source": "official"}}}))
    (root / ".usage.json").write_text(json.dumps({"deploy": {"use_count": 7}, "noname": {"view_count": 3.0}}))
    return root


def _canon(rows: list[dict]) -> list[dict]:
    keys = ("name", "category", "path", "provenance", "description", "body", "frontmatter")
    out = []
    for r in rows:
        d = {k: r[k] for k in keys}
        d["frontmatter"] = orjson.loads(d["frontmatter"]) if isinstance(d["frontmatter"], str) else d["frontmatter"]
        out.append(d)
    return sorted(out, key=lambda d: d["name"])


def test_watcher_and_folder_reader_agree(folder, tmp_path):
    lk = Lake.init(tmp_path / "lake")
    w = Watcher(lk, skills_dir=folder, settle=0.0)
    for _ in range(3):  # the first sighting records a file's signature; it is read once stable
        w.scan()
    with lk.snapshot() as snap:
        lake_skills = snap.arrow("SELECT * FROM skills").to_pylist()
        lake_usage = snap.arrow("SELECT name, use_count, view_count, patch_count, usage FROM skill_usage").to_pylist()
        errors = snap.arrow("SELECT source_path, reason FROM ingest_errors").to_pylist()
    fold = read_hermes_folder(folder)

    assert _canon(lake_skills) == _canon(fold.skills)
    got = {r["name"]: (r["category"], r["path"]) for r in fold.skills}
    assert got == ACCEPTED
    prov = {r["name"]: r["provenance"] for r in fold.skills}
    assert (prov["flat-one"], prov["serving-llms-vllm"], prov["deploy"]) == ("bundled", "hub", "agent")
    # warnings travel in the lake's metadata: what was read by line scan or named after its folder
    warn = {r["name"]: orjson.loads(r["metadata"]).get("warnings", []) for r in lake_skills}
    assert any("not valid YAML" in x for x in warn["yaml-broken"])
    assert any("not a YAML mapping" in x for x in warn["listfm"])
    assert any("named after its folder" in x for x in warn["noname"])
    assert not any("folder" in x for x in warn["yaml-broken"])

    # the same files are refused, for the same reasons
    watch_errs = {Path(e["source_path"]).relative_to(folder).as_posix(): e["reason"] for e in errors}
    fold_errs = {e.path: e.reason for e in fold.problems}
    assert set(watch_errs) == set(fold_errs) == set(REFUSED)
    for rel, why in REFUSED.items():
        assert why in watch_errs[rel] and why in fold_errs[rel], rel

    # usage: one record per sidecar entry, missing keys filled the same way
    canon_usage = sorted((r["name"], r["use_count"], r["view_count"], r["patch_count"],
                          orjson.loads(r["usage"]) if isinstance(r["usage"], str) else r["usage"]) for r in lake_usage)
    assert canon_usage == sorted((r["name"], r["use_count"], r["view_count"], r["patch_count"], r["usage"])
                                 for r in fold.usage)
    assert ("noname", 0, 3, 0) == canon_usage[1][:4]


def test_reader_edge_cases():
    doc = read_skill_file(b"---\ndescription: d\n---\nbody\n", "cat/sub/thing/SKILL.md")
    assert (doc.name, doc.name_source, doc.category) == ("thing", "folder", "cat")
    with pytest.raises(SkillFileError) as ei:  # no frontmatter name and no folder to fall back on
        read_skill_file(b"---\ndescription: d\n---\nbody\n", "SKILL.md")
    assert (ei.value.path, ei.value.field, ei.value.kind) == ("SKILL.md", "name", "missing")
    assert "SKILL.md" in str(ei.value) and "field name" in str(ei.value)
    with pytest.raises(SkillFileError) as ei:
        read_skill_file(b"---\nname: ok\n---\n\n", "a/ok/SKILL.md")
    assert (ei.value.path, ei.value.field) == ("a/ok/SKILL.md", "body")
    # YAML dates and non-string keys become JSON values; a BOM is ignored
    doc = read_skill_file("\ufeff---\nname: d\ncreated: 2026-05-01\n1: one\n---\nx\n".encode(), "d/SKILL.md")
    assert doc.frontmatter == {"name": "d", "created": "2026-05-01", "1": "one"}
    assert json.dumps(doc.frontmatter)
    # the folder is the category; the frontmatter's only for a flat skill, and only when it is a valid name
    assert read_skill_file(b"---\nname: n\ncategory: ../x\n---\nb\n", "n/SKILL.md").category is None
    assert read_skill_file(b"---\nname: n\ncategory: c\n---\nb\n", "n/SKILL.md").category == "c"
    assert read_skill_file(b"---\nname: n\ncategory: c\n---\nb\n", "top/n/SKILL.md").category == "top"
    assert read_skill_file(b"---\nname: n\ncategory: c\n---\nb\n", "top/mid/n/SKILL.md").category == "top"


def test_walk_order_decides_duplicates(tmp_path):
    # "a-b" sorts before "a/b" as a string, but the walk visits folder "a" first: the walk order is the rule
    for rel, body in (("a/b/SKILL.md", "first"), ("a-b/SKILL.md", "second")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"---\nname: same\n---\n{body}\n")
    docs, errs = read_skills(tmp_path)
    assert [d.body.strip() for d in docs] == ["first"] and [e.kind for e in errs] == ["duplicate_name"]
    assert [s["body"].strip() for s in read_hermes_folder(tmp_path).skills] == ["first"]


def test_latest_version_is_the_same_for_server_watcher_and_view(tmp_path, folder):
    """Versions are ordered by (occurred_at, event_id) everywhere: an event that arrives later but happened
    earlier is not the latest."""
    lk = Lake.init(tmp_path / "lake")
    lk.append("skills", [
        {"name": "deploy", "provenance": "agent", "path": "devops/deploy/SKILL.md", "category": "devops",
         "body": "new", "occurred_at": "2026-05-02T00:00:00Z", "metadata": {"sha256": "new", "root": str(folder)}}])
    lk.append("skills", [  # ingested later, happened earlier
        {"name": "deploy", "provenance": "agent", "path": "devops/deploy/SKILL.md", "category": "devops",
         "body": "old", "occurred_at": "2026-05-01T00:00:00Z", "metadata": {"sha256": "old", "root": str(folder)}}])
    with lk.snapshot() as snap:
        assert snap.arrow("SELECT body FROM skills_current WHERE name = 'deploy'").to_pylist() == [{"body": "new"}]
    assert IngestState.load(lk, ServeConfig()).skill_hash["deploy"] == "new"
    w = Watcher(lk, skills_dir=folder, settle=0.0)
    assert w.mirror.skills["deploy"]["sha256"] == "new"
