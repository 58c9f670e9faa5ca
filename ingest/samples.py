"""The sample skills shipped with the package: hermes-agent 0.19.0's SKILL.md corpus, as Hermes lays it out.

The corpus (`ingest/data/hermes_skills_0.19.0.tar.gz`: every SKILL.md and DESCRIPTION.md of the 0.19.0 sdist's
`skills/` and `optional-skills/` trees, with its MIT licence; see ingest/data/README.md) is package data, so
the demo, the tests and a user of the wheel all read the same skills. `sample_skills_tree` turns it into the
folder `lake watch --skills` watches: `~/.hermes/skills` after the optional skills are installed from the hub.
"""
from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from importlib.resources import as_file, files
from pathlib import Path

CORPUS = "hermes_skills_0.19.0.tar.gz"


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


def sample_skills_tree(dest: Path) -> Path:
    """A Hermes skills folder (`<category>/<name>/SKILL.md`, 177 skills) at `dest`: the bundled skills with the
    hub-installable optional ones merged in, `.bundled_manifest` naming the bundled ones and `.hub/lock.json`
    the installed hub ones. Returns `dest`, the folder to watch."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        src = extract_corpus(Path(tmp))
        shutil.copytree(src / "skills", dest, dirs_exist_ok=True)
        shutil.copytree(src / "optional-skills", dest, dirs_exist_ok=True)
        bundled = [n for p in sorted((src / "skills").rglob("SKILL.md")) if (n := _frontmatter_name(p))]
        hub = sorted({p.parent.name for p in (src / "optional-skills").rglob("SKILL.md")})
    (dest / ".bundled_manifest").write_text("".join(f"{n}:0\n" for n in bundled), encoding="utf-8")
    (dest / ".hub").mkdir(exist_ok=True)
    lock = {"version": 1, "installed": {d: {"source": "official", "identifier": f"official/{d}"} for d in hub}}
    (dest / ".hub" / "lock.json").write_text(json.dumps(lock, indent=2), encoding="utf-8")
    return dest
