"""The sample skills shipped with the package: hermes-agent 0.19.0's SKILL.md corpus, as Hermes lays it out.

The corpus (`ingest/data/hermes_skills_0.19.0.tar.gz`: every SKILL.md and DESCRIPTION.md of the 0.19.0 sdist's
`skills/` and `optional-skills/` trees, with its MIT licence; see ingest/data/README.md) is package data, so
the demo, the tests and a user of the wheel all read the same skills. `sample_skills_tree` turns it into the
folder `lake watch --skills` watches: `~/.hermes/skills` after the optional skills are installed from the hub.
There every skill is bundled or hub, and none has usage counts, so skill_to_instruction (agent-created skills
used at least 5 times) rightly selects none of them; `agent_skills_tree` lays the same skills out as an agent's
own (no bundle manifest, no hub lock) with a sample `.usage.json`, so strategy 4 runs end to end out of the box
(`lake samples skills DIR`). That layout adds the project's own skills for its environments (`ingest/data/skills/`,
`<category>/<name>/SKILL.md` in Hermes' format: web form filling for web_form_env), which an agent writes, not
Hermes' installer.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
from importlib.resources import as_file, files
from pathlib import Path

CORPUS = "hermes_skills_0.19.0.tar.gz"
OWN_SKILLS = "skills"  # ingest/data/skills: the project's own SKILL.md files, beside the corpus


def extract_corpus(dest: Path) -> Path:
    """Unpack the corpus as the sdist has it: dest/skills (bundled), dest/optional-skills (hub), dest/LICENSE."""
    with as_file(files("ingest") / "data" / CORPUS) as tgz, tarfile.open(tgz) as tf:
        tf.extractall(dest, filter="data")
    return Path(dest)


def _frontmatter_name(skill_md: Path) -> str | None:
    for line in skill_md.read_text(encoding="utf-8").splitlines():
        if line.startswith("name:"):
            return line.split(":", 1)[1].strip()
    return None


def _copy_trees(src: Path, dest: Path) -> list[str]:
    """The bundled and optional trees merged into `dest`; the skill names, sorted."""
    shutil.copytree(src / "skills", dest, dirs_exist_ok=True)
    shutil.copytree(src / "optional-skills", dest, dirs_exist_ok=True)
    return skill_names(dest)


def skill_names(root: Path) -> list[str]:
    """The front-matter names of every SKILL.md under `root`, sorted."""
    return sorted({n for p in root.rglob("SKILL.md") if (n := _frontmatter_name(p))})


# The sample counters: a fixed date and a use count from the name's hash, 0-14, so about two thirds of the skills
# reach the guide's 5 uses and the rest show the filter at work; the same on every machine.
SAMPLE_USAGE_AT = "2026-05-01T00:00:00+00:00"


def sample_usage(name: str) -> dict:
    """A `.usage.json` record (Hermes' `_empty_record` fields) for an agent-created skill, marked as a sample."""
    uses = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 15
    return {"archived_at": None, "created_at": SAMPLE_USAGE_AT, "created_by": "agent", "last_patched_at": None,
            "last_used_at": SAMPLE_USAGE_AT if uses else None, "last_viewed_at": SAMPLE_USAGE_AT if uses else None,
            "patch_count": 0, "pinned": False, "state": "active", "use_count": uses, "view_count": uses,
            "sample": True}


def agent_skills_tree(dest: Path) -> Path:
    """The 177 sample skills and the project's own (2 for web forms) at `dest` as an agent's own skills folder:
    `<category>/<name>/SKILL.md`, no `.bundled_manifest` and no `.hub/lock.json` (so every skill's provenance is
    agent), and a `.usage.json` of sample counters (`sample_usage`, written as Hermes writes it: indent 2, sorted
    keys). Returns `dest`."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        _copy_trees(extract_corpus(Path(tmp)), dest)
    with as_file(files("ingest") / "data" / OWN_SKILLS) as own:
        shutil.copytree(own, dest, dirs_exist_ok=True)
    names = skill_names(dest)
    usage = {n: sample_usage(n) for n in names}
    (dest / ".usage.json").write_text(json.dumps(usage, indent=2, sort_keys=True, ensure_ascii=False),
                                      encoding="utf-8")
    return dest


def sample_skills_tree(dest: Path) -> Path:
    """A Hermes skills folder (`<category>/<name>/SKILL.md`, 177 skills) at `dest`: the bundled skills with the
    hub-installable optional ones merged in, `.bundled_manifest` naming the bundled ones and `.hub/lock.json`
    the installed hub ones. Returns `dest`, the folder to watch."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        src = extract_corpus(Path(tmp))
        _copy_trees(src, dest)
        bundled = [n for p in sorted((src / "skills").rglob("SKILL.md")) if (n := _frontmatter_name(p))]
        hub = sorted({p.parent.name for p in (src / "optional-skills").rglob("SKILL.md")})
    (dest / ".bundled_manifest").write_text("".join(f"{n}:0\n" for n in bundled), encoding="utf-8")
    (dest / ".hub").mkdir(exist_ok=True)
    lock = {"version": 1, "installed": {d: {"source": "official", "identifier": f"official/{d}"} for d in hub}}
    (dest / ".hub" / "lock.json").write_text(json.dumps(lock, indent=2), encoding="utf-8")
    return dest
