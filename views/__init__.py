"""Dataset views over the lake: `*.sql` files (one SELECT each, registered as a view of the same name on
every lake snapshot) and the code that materialises them with a lineage manifest.

Kept light on purpose: importing `views` reads no SQL and imports nothing heavy. The lake finds this
directory as data (`lake.lake.default_views_dir()`); nothing here imports torch.
"""
from __future__ import annotations

import re
from pathlib import Path

VIEWS_DIR = Path(__file__).resolve().parent

_ORDER_RE = re.compile(r"^--\s*order:\s*(.+?)\s*$", re.MULTILINE)


def list_views(views_dir: str | Path | None = None) -> list[str]:
    """Names of the views defined in `views_dir` (default: this package), sorted."""
    d = Path(views_dir) if views_dir else VIEWS_DIR
    return sorted(p.stem for p in d.glob("*.sql"))


def view_sql(name: str, views_dir: str | Path | None = None) -> str:
    d = Path(views_dir) if views_dir else VIEWS_DIR
    return (d / f"{name}.sql").read_text(encoding="utf-8")


def view_order(name: str, views_dir: str | Path | None = None) -> list[str]:
    """The deterministic row order a view declares in its `-- order: a, b` comment ([] if none)."""
    m = _ORDER_RE.search(view_sql(name, views_dir))
    return [c.strip() for c in m.group(1).split(",") if c.strip()] if m else []


def view_description(name: str, views_dir: str | Path | None = None) -> str:
    """The first sentence of a view's leading comment."""
    words = []
    for line in view_sql(name, views_dir).splitlines():
        line = line.strip()
        if not line.startswith("--"):
            break
        if not _ORDER_RE.match(line):
            words.append(line.lstrip("-").strip())
    text = " ".join(words)
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


# Helper views used by other views; `lake views` lists them apart from the datasets.
HELPER_VIEWS = {"trajectory_chats", "skill_sections", "instruction_candidates", "skill_uses"}
