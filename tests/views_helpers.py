"""Builders shared by the views, export and skill tests (no tests here): a real lake filled with seeded
trajectories, and a Hermes skills home built from the vendored hermes-agent skill corpus."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import shutil
import tarfile
from pathlib import Path

import yaml

from lake import Lake
from lake.as_of import MANIFEST_NAME

DATA = Path(__file__).parent / "data"
CORPUS_TAR = Path(__file__).parent.parent / "ingest" / "data" / "hermes_skills_0.19.0.tar.gz"  # package data
FIXTURE = DATA / "hermes_skills_views"
T0 = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)


def read_manifest(folder: str | Path) -> dict:
    """The manifest.json an export wrote into `folder`."""
    return json.loads((Path(folder) / MANIFEST_NAME).read_text(encoding="utf-8"))


def chat(task: str, ok: bool, i: int, *, with_tool: bool = True) -> list[dict]:
    msgs = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": f"Solve {task}"},
    ]
    if with_tool:
        msgs += [
            {"role": "assistant", "content": "", "reasoning": f"try attempt {i}",
             "tool_calls": [{"id": f"call_{i}", "name": "bash", "arguments": {"cmd": f"run {task} {i}", "flag": None}}]},
            {"role": "tool", "content": f"output {i}", "tool_call_id": f"call_{i}", "name": "bash"},
        ]
    msgs.append({"role": "assistant", "content": f"{'solved' if ok else 'gave up on'} {task} ({i})"})
    return msgs


def trajectory(i: int, task: str, reward: float | None, success: bool | None, *, split: str | None = None,
               steps: list[dict] | None = None, messages: list[dict] | None = None, at: int | None = None) -> dict:
    rec = {
        "trajectory_id": f"traj-{i:05d}", "task_id": task, "env": "bash_exec", "model": "tiny",
        "messages": messages if messages is not None else chat(task, bool(success), i),
        "reward": reward, "success": success,
        "occurred_at": (T0 + dt.timedelta(seconds=at if at is not None else i)).isoformat(),
    }
    if split:
        rec["split"] = split
    if steps is not None:
        rec["steps"] = steps
    return rec


def seeded_trajectories(n: int, seed: int = 7, n_tasks: int = 40, start: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        task = f"task-{rng.randrange(n_tasks):03d}"
        ok = rng.random() < 0.5
        reward = round(rng.random(), 3) if not ok else 1.0
        out.append(trajectory(i, task, reward, ok))
    return out


def new_lake(path: Path) -> Lake:
    return Lake.init(path)


# -- Hermes skills home from the real corpus ------------------------------------------------------------------
def _frontmatter(text: str) -> dict:
    assert text.startswith("---")
    end = text.index("\n---", 3)
    return yaml.safe_load(text[3:end]) or {}


def _dir_md5(d: Path) -> str:
    h = hashlib.md5()
    for p in sorted(d.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(d).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def build_hermes_home(dest: Path, seed: int = 11) -> dict:
    """A `$HERMES_HOME/skills` folder from the vendored hermes-agent corpus: the repo's `skills/` are bundled
    (listed in .bundled_manifest), about two thirds of `optional-skills/` are hub installs (.hub/lock.json) and
    the remaining third stand for skills the agent created. A seeded `.usage.json` covers most skills; a
    quarter of its records are old-style (use_count 0, counts only in view_count).

    Returns {name: {"provenance", "use_count", "view_count", "path"}} computed here, independently of views/."""
    rng = random.Random(seed)
    src = dest.parent / (dest.name + "_src")
    with tarfile.open(CORPUS_TAR) as tf:
        tf.extractall(src, filter="data")
    dest.mkdir(parents=True)
    truth: dict[str, dict] = {}
    bundled_lines, hub = [], {}
    for tree, kind in (("skills", "bundled"), ("optional-skills", "optional")):
        root = src / tree
        for skill_md in sorted(root.rglob("SKILL.md")):
            rel = skill_md.parent.relative_to(root)
            target = dest / rel
            if target.exists():
                continue
            name = str(_frontmatter(skill_md.read_text(encoding="utf-8")).get("name") or rel.name).strip()
            if name in truth:
                continue
            shutil.copytree(skill_md.parent, target)
            if kind == "bundled":
                prov = "bundled"
                bundled_lines.append(f"{name}:{_dir_md5(target)}")
            elif rng.random() < 2 / 3:
                prov = "hub"
                hub[rel.name] = {"source": "official", "identifier": f"official/{rel.as_posix()}",
                                 "trust_level": "official", "install_path": rel.as_posix()}
            else:
                prov = "agent"
            truth[name] = {"provenance": prov, "path": rel.as_posix()}
        for desc in root.rglob("DESCRIPTION.md"):
            target = dest / desc.relative_to(root)
            if not target.exists() and target.parent.exists():
                shutil.copy(desc, target)
    (dest / ".bundled_manifest").write_text("\n".join(bundled_lines) + "\n", encoding="utf-8")
    (dest / ".hub").mkdir()
    (dest / ".hub" / "lock.json").write_text(json.dumps({"version": 1, "installed": hub}, indent=2), encoding="utf-8")
    usage = {}
    for name in sorted(truth):
        if rng.random() < 0.1:  # no sidecar record at all
            truth[name].update(use_count=0, view_count=0)
            continue
        uses = rng.randrange(0, 12)
        if rng.random() < 0.25:  # before hermes-agent#17932: use_count stuck at 0
            rec = {"use_count": 0, "view_count": uses, "patch_count": rng.randrange(3)}
        else:
            rec = {"use_count": uses, "view_count": rng.randrange(0, uses + 1), "patch_count": rng.randrange(3)}
        rec.update(created_by="agent" if truth[name]["provenance"] == "agent" and rng.random() < 0.5 else None,
                   state="active", pinned=False, last_used_at="2026-05-06T00:00:00+00:00")
        usage[name] = rec
        truth[name].update(use_count=rec["use_count"], view_count=rec["view_count"])
    (dest / ".usage.json").write_text(json.dumps(usage, indent=2, sort_keys=True), encoding="utf-8")
    shutil.rmtree(src)
    return truth


def expected_selection(truth: dict, min_uses: int = 5, provenance: str = "agent") -> set[str]:
    """The guide's filter, written out: agent-created, uses >= min_uses (use_count, else view_count)."""
    out = set()
    for name, t in truth.items():
        uses = t["use_count"] if t["use_count"] > 0 else t["view_count"]
        if (provenance == "all" or t["provenance"] == provenance) and uses >= min_uses:
            out.add(name)
    return out


def ingest_skills_folder(lake: Lake, root: Path) -> None:
    """Load a Hermes skills folder into the lake the product's way: one pass of `lake watch`'s Watcher
    (the ingest wing's parser and provenance rules, not views/)."""
    from ingest.watch import Watcher

    w = Watcher(lake, skills_dir=root, settle=0.0)
    for _ in range(3):  # a first sighting only records a file's signature; it is read once it is stable
        w.scan()
    assert w.stats["skill_upserts"] > 0, w.stats
