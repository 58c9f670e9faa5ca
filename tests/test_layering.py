"""The layering of docs/ARCHITECTURE.md holds: the import-linter contracts in pyproject.toml pass on this tree,
and they do fail when a forbidden import is added (checked on a copy of the tree, never on the tree itself)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["ground", "transcript", "lake", "views", "edge", "ingest", "envs", "trainers", "serving", "ui", "lachesis",
            "placement"]


def lint(tree: Path) -> tuple[int, str]:
    """Run lint-imports with the tree's pyproject.toml; (exit status, report). lint-imports puts its working
    directory first on sys.path, so a copy of the tree is read instead of the editable install."""
    res = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                          "sys.exit(lint_imports_command())", "--no-cache", "--config", "pyproject.toml"],
                         cwd=tree, capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout + res.stderr


def broken_section(report: str) -> str:
    return report.split("Broken contracts", 1)[1] if "Broken contracts" in report else ""


def test_contracts_hold_on_this_tree():
    code, report = lint(ROOT)
    assert code == 0 and re.search(r"Contracts: \d+ kept, 0 broken", report), report


def _copy_tree(dest: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


@pytest.mark.parametrize("module, source, contract", [
    ("lake/_upward.py", "from views.export import export_view\n", "lake imports nothing of ours"),
    ("envs/_uses_lake.py", "import lake\n", "envs import nothing of ours"),
    ("envs/sandbox/_upward.py", "from envs.core.tasks import Task\n", "envs' packages by job"),
    ("envs/families/_sideways.py", "from envs.web import suite\n", "envs' packages by job"),
    ("transcript/_uses_envs.py", "def f():\n    import envs\n", "the message model"),
    ("ingest/_torch.py", "def f():\n    import torch\n", "no torch, transformers, peft or trl below"),
    ("serving/_uses_ingest.py", "def f():\n    from ingest import http\n", "serving imports no ingest module"),
    ("edge/_uses_ingest.py", "import ingest\n", "the HTTP edge both servers share imports only"),
    ("lake/_circle.py", "from lake import lake\n", "the lake's modules import each other without circles"),
    ("views/_circle.py", "from views import export\n", "the views' modules import each other without circles"),
])
def test_a_forbidden_import_breaks_the_contracts(tmp_path, module, source, contract):
    _copy_tree(tmp_path)
    circles = {"lake/_circle.py": "lake/lake.py", "views/_circle.py": "views/export.py"}  # X -> _circle -> X
    if module in circles:
        package, sibling = Path(module).parent.name, circles[module]
        (tmp_path / sibling).write_text(f"from {package} import _circle\n" + (ROOT / sibling).read_text())
    (tmp_path / module).write_text(source)
    code, report = lint(tmp_path)
    broken = broken_section(report)
    assert code == 1 and contract in broken, report
    assert Path(module).stem in broken, report  # the module added to the copy: the copy was read


def test_the_ground_imports_the_standard_library_and_orjson_only():
    """ground/ (the generic helpers every wing uses: envs and the model code on a machine with no lake included)
    stands on the standard library and orjson alone; the ground-bottom contract checks our packages, this the rest."""
    import ast

    allowed = set(sys.stdlib_module_names) | {"orjson", "ground", "__future__"}
    outside = []
    for path in sorted((ROOT / "ground").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            outside += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in allowed]
    assert outside == []
