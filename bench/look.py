"""The house seen from above: the import graph between Lachesis's packages (trainers/ by sub-package), checked
for circles and for arrows that point up, with lines and files per package and the files over the size limit.

The layers are those of docs/ARCHITECTURE.md, top first; packages on one layer are siblings that never import
each other. An import counts wherever it stands (module top, inside a function, under TYPE_CHECKING), as
import-linter counts it; tests/test_layering.py keeps the same rules module by module, this script draws them.
It reads the source with `ast` only, so it runs on any copy of the tree without importing it.

    python bench/look.py [--root .] [--limit 500] [--fail-over N]

Exit status 1 when a circle, an upward or sideways arrow, or a file over --fail-over lines (default: none) is
found; the figure is printed either way. docs/ARCHITECTURE.md shows its output with the date it ran.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# top first; a unit is a top-level package, or trainers' sub-package named "trainers.<name>"
LAYERS: list[list[str]] = [
    ["lachesis"],
    ["serving", "ui"],
    ["trainers.watch", "trainers.transfer"],
    ["trainers.rl"],
    ["trainers.sft", "trainers.eval", "trainers.export"],
    ["trainers.generation"],
    ["trainers.modeling"],
    ["trainers.runtime"],
    ["views", "ingest"],
    ["edge"],
    ["lake", "envs", "placement"],
    ["ground", "transcript"],
]
SPLIT = {"trainers"}  # packages drawn by sub-package
OUTSIDE = ("bench", "tests")  # not held to the size limit


@dataclass
class House:
    units: dict[str, int]  # unit -> layer index (0 is the top)
    files: dict[str, int] = field(default_factory=dict)  # unit -> .py files
    lines: dict[str, int] = field(default_factory=dict)  # unit -> lines of Python
    edges: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))  # -> importing modules
    long_files: list[tuple[str, int]] = field(default_factory=list)  # (path, lines) over the limit, longest first

    def upward(self) -> list[tuple[str, str]]:
        """Arrows from a unit to one on its own layer or above it."""
        return sorted(e for e in self.edges if self.units[e[1]] <= self.units[e[0]])

    def circles(self) -> list[list[str]]:
        """The strongly connected components of more than one unit (Tarjan), each sorted."""
        graph: dict[str, list[str]] = defaultdict(list)
        for a, b in self.edges:
            graph[a].append(b)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in graph[v]:
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        for unit in sorted(self.units):
            if unit not in index:
                visit(unit)
        return sorted(found)


def unit_of(module: str, units: dict[str, int]) -> str | None:
    """The unit a dotted module name belongs to, or None when it is not ours (or is a split package's own
    __init__, which belongs to no layer)."""
    parts = module.split(".")
    if parts[0] in SPLIT:
        return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in units else None
    return parts[0] if parts[0] in units else None


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name an `import` or `from ... import` in the tree names, relative ones resolved."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            # `from trainers import rl` names the sub-package itself
            names.update(f"{prefix}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def survey(root: Path, limit: int, layers: list[list[str]] = LAYERS) -> House:
    units = {unit: depth for depth, layer in enumerate(layers) for unit in layer}
    house = House(units)
    for unit in units:
        house.files[unit] = house.lines[unit] = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0].startswith(".") or "__pycache__" in rel.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        n_lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if rel.parts[0] not in OUTSIDE and n_lines > limit:
            house.long_files.append((rel.as_posix(), n_lines))
        module = ".".join(rel.with_suffix("").parts)
        is_package = rel.name == "__init__.py"
        if is_package:
            module = module.rpartition(".")[0]
        source = unit_of(module, units)
        if source is None:
            continue
        house.files[source] += 1
        house.lines[source] += n_lines
        for name in imported_modules(ast.parse(text, filename=str(rel)), module, is_package):
            target = unit_of(name, units)
            if target is not None and target != source:
                house.edges[(source, target)].add(module)
    house.long_files.sort(key=lambda item: -item[1])
    return house


def figure(house: House, layers: list[list[str]], limit: int) -> str:
    """The layered picture: one row per unit, top layer first, with its arrows down and any arrow that breaks
    the order marked; then the verdicts."""
    bad = set(house.upward())
    rows = ["| layer | package | files | lines | imports (modules importing it) |", "|---|---|---|---|---|"]
    for depth, layer in enumerate(layers):
        for unit in layer:
            targets = sorted((b for a, b in house.edges if a == unit), key=lambda b: (house.units[b], b))
            arrows = ", ".join(f"{'**↑ ' if (unit, b) in bad else ''}{b} ({len(house.edges[(unit, b)])})"
                               f"{'**' if (unit, b) in bad else ''}" for b in targets) or "—"
            rows.append(f"| {depth} | `{unit}` | {house.files[unit]} | {house.lines[unit]} | {arrows} |")
    circles = house.circles()
    total = sum(house.lines.values())
    rows += ["",
             f"{len(house.edges)} arrows between {len(house.units)} packages, {total} lines in "
             f"{sum(house.files.values())} files.",
             f"- circles: {'none' if not circles else '; '.join(' ↔ '.join(c) for c in circles)}",
             f"- arrows up or sideways: {'none' if not bad else ', '.join(f'{a} → {b}' for a, b in sorted(bad))}",
             f"- files over {limit} lines outside {' and '.join(f'{o}/' for o in OUTSIDE)}: "
             + (", ".join(f"{p} ({n})" for p, n in house.long_files) or "none")]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root to read")
    parser.add_argument("--limit", type=int, default=500, help="list files longer than this many lines")
    parser.add_argument("--fail-over", type=int, default=0,
                        help="exit 1 when a file outside bench/ and tests/ has more lines than this (0: never)")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    house = survey(args.root, args.limit)
    print(figure(house, LAYERS, args.limit))
    too_long = args.fail_over and any(n > args.fail_over for _, n in house.long_files)
    return 1 if house.circles() or house.upward() or too_long else 0


if __name__ == "__main__":
    sys.exit(main())
