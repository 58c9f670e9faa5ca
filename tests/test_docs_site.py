"""The documentation (issue 47 item 7): the README is a map whose first screen is the quick start, and the site built
from docs/ is strict: it builds, and a broken link or anchor in a page fails the build."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([*MKDOCS, "--config-file", str(config_dir / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_readme_is_a_map_with_the_quick_start_on_its_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: dated tables and details belong in docs/"
    first_screen = "\n".join(lines[:45])
    assert "## Quick start" in first_screen and "bash scripts/bootstrap.sh demo" in first_screen
    assert ".venv/bin/just test" in first_screen


def test_every_page_in_docs_is_in_the_site_and_it_builds_strictly(tmp_path):
    res = _build(ROOT, tmp_path / "site")
    assert res.returncode == 0, res.stderr[-2000:]
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    built = {p.parent.name if p.parent != tmp_path / "site" else "index" for p in (tmp_path / "site").rglob("index.html")}
    assert pages <= built | {"index"}, f"pages not in the site: {sorted(pages - built)}"


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    for bad in ("[gone](no-such-page.md)", "[gone](lake.md#no-such-anchor)", "[outside](../README.md)"):
        shutil.rmtree(tmp_path / "proj", ignore_errors=True)
        shutil.copytree(ROOT / "docs", tmp_path / "proj" / "docs")
        shutil.copy(ROOT / "mkdocs.yml", tmp_path / "proj" / "mkdocs.yml")
        page = tmp_path / "proj" / "docs" / "compare.md"
        page.write_text(page.read_text() + f"\n{bad}\n")
        res = _build(tmp_path / "proj", tmp_path / "site")
        assert res.returncode != 0, f"{bad} passed the strict build"
        assert "compare.md" in res.stderr
