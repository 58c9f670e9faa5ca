"""bench/look.py, the figure of docs/ARCHITECTURE.md: on this tree it finds no circle between packages, no arrow
up or sideways, and no file over 550 lines outside bench/ and tests/; on a small made-up tree it does find the
circle, the upward arrow and the long file it is given (so a clean answer is not an empty one)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import look  # noqa: E402


def test_this_tree_has_no_circle_no_arrow_up_and_no_long_file():
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "look.py"), "--root", str(ROOT), "--fail-over", "550"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "- circles: none" in res.stdout and "- arrows up or sideways: none" in res.stdout, res.stdout
    house = look.survey(ROOT, 550)
    assert house.long_files == [], house.long_files
    # every layer's package was read (a tree that moved would show as an empty row, not as a clean one)
    assert all(house.files[unit] > 0 for unit in house.units), house.files
    assert ("lachesis", "lake") in house.edges and ("trainers.rl", "trainers.generation") in house.edges


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_made_up_tree_shows_its_circle_its_arrow_up_and_its_long_file(tmp_path):
    layers = [["top"], ["mid_a", "mid_b"], ["ground"]]
    _write(tmp_path, "top/__init__.py", "")
    _write(tmp_path, "top/face.py", "from mid_a import x\n")
    _write(tmp_path, "mid_a/__init__.py", "")
    _write(tmp_path, "mid_a/x.py", "def f():\n    from mid_b import y\n")  # sideways, inside a function
    _write(tmp_path, "mid_b/__init__.py", "from . import y\n")
    _write(tmp_path, "mid_b/y.py", "import mid_a.x\n")  # and back: a circle
    _write(tmp_path, "ground/__init__.py", "")
    _write(tmp_path, "ground/g.py", "from top.face import *\n" + "pass\n" * 20)  # up, and 21 lines
    _write(tmp_path, "bench/long.py", "pass\n" * 30)  # bench/ is not held to the limit
    house = look.survey(tmp_path, 20, layers)
    assert house.circles() == [["mid_a", "mid_b"]]
    assert house.upward() == [("ground", "top"), ("mid_a", "mid_b"), ("mid_b", "mid_a")]
    assert house.long_files == [("ground/g.py", 21)]
    assert house.edges[("top", "mid_a")] == {"top.face"}
    text = look.figure(house, layers, 20)
    assert "circles: mid_a ↔ mid_b" in text and "**↑ top (1)**" in text and "ground/g.py (21)" in text
