"""python_debug_env's bug classes beyond the first eleven (issue 24): wrong comparison boundaries, integer vs
true division, the wrong string method, an off-by-one index, a missing key, swapped operands, a type error
(int + str), a missing sort order, the wrong variable returned, a missing abs(), a range step, the wrong
exception caught, the wrong separator. One planted bug per function, fixed by replacing one line.

Families in HELD_OUT form the test_families split only (bug classes never seen in training).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Family:
    """A function with one planted bug. `code` uses {fn} and the argument names; `bug` -> `fix` is one line."""

    args: tuple[str, ...]
    code: str
    bug: str
    fix: str
    hint: str
    cases: Callable[[random.Random], list[tuple[tuple, object]]]  # inputs -> expected (from the fixed code)
    extra: tuple[str, ...] = ()  # local variable names to draw


def ints(rng: random.Random, n: int, lo: int = 1, hi: int = 9) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(("ab", "cd", "efg", "hij", "k", "lmno", "pq", "rstu")) for _ in range(n)]


MORE_FAMILIES: dict[str, Family] = {
    "all_positive": Family(("xs",), "def {fn}({xs}):\n    for {x} in {xs}:\n        {line}\n            return False\n"
                           "    return True\n", "if {x} < 0:", "if {x} <= 0:",
                           "should tell whether every item of {xs} is greater than zero",
                           lambda r: [((v,), all(x > 0 for x in v)) for v in
                                      ([1, 2], [0, 3], [4, 0, 5], [2, 2, 2], [0])], ("x",)),
    "floor_mean": Family(("xs",), "def {fn}({xs}):\n    {line}\n", "return sum({xs}) / len({xs})",
                         "return sum({xs}) // len({xs})", "should return the mean of {xs} rounded down to an int",
                         lambda r: [((v,), sum(v) // len(v)) for v in ([1, 2], [3, 4, 6], [5, 6], [7, 7, 8], [1, 4])]),
    "strip": Family(("s",), "def {fn}({s}):\n    {line}\n", "return {s}.lstrip()", "return {s}.strip()",
                    "should remove the spaces at both ends of {s}",
                    lambda r: [((s,), s.strip()) for s in (" a ", "b  ", "  c d ", "e", " f")]),
    "middle": Family(("xs",), "def {fn}({xs}):\n    {line}\n", "return {xs}[len({xs}) // 2 + 1]",
                     "return {xs}[len({xs}) // 2]", "should return the middle item of {xs} (odd length)",
                     lambda r: [((v,), v[len(v) // 2]) for v in (ints(r, n) for n in (3, 5, 3, 7, 5))]),
    "difference": Family(("a", "b"), "def {fn}({a}, {b}):\n    {line}\n", "return {b} - {a}", "return {a} - {b}",
                         "should return how much larger {a} is than {b}",
                         lambda r: [((x, y), x - y) for x, y in ((9, 4), (7, 2), (5, 5), (8, 1), (6, 3))]),
    "label": Family(("n",), "def {fn}({n}):\n    {line}\n", "return {n} + ' items'", "return str({n}) + ' items'",
                    "should return a label such as '3 items' for the count {n}",
                    lambda r: [((n,), f"{n} items") for n in r.sample(range(2, 40), 5)]),
    "descending": Family(("xs",), "def {fn}({xs}):\n    {line}\n", "return sorted({xs})",
                         "return sorted({xs}, reverse=True)", "should return {xs} sorted from largest to smallest",
                         lambda r: [((v,), sorted(v, reverse=True)) for v in (ints(r, 4) for _ in range(5))]),
    "longest": Family(("words",), "def {fn}({words}):\n    {best} = ''\n    for {w} in {words}:\n"
                      "        if len({w}) > len({best}):\n            {best} = {w}\n    {line}\n",
                      "return {w}", "return {best}", "should return the longest string in {words}",
                      lambda r: [((v,), max(v, key=len)) for v in (["ab", "cde", "f"], ["xyz", "q"],
                                                                   ["aaaa", "b", "cc"], ["m", "nn"], ["ooo", "pp", "r"])],
                      ("best", "w")),
    "distance": Family(("a", "b"), "def {fn}({a}, {b}):\n    {line}\n", "return {a} - {b}", "return abs({a} - {b})",
                       "should return the distance between {a} and {b} (never negative)",
                       lambda r: [((x, y), abs(x - y)) for x, y in ((2, 9), (7, 3), (1, 8), (4, 4), (0, 6))]),
    "evens_upto": Family(("n",), "def {fn}({n}):\n    {line}\n", "return list(range(0, {n}, 1))",
                         "return list(range(0, {n} + 1, 2))", "should list the even numbers from 0 up to {n} inclusive",
                         lambda r: [((n,), list(range(0, n + 1, 2))) for n in (4, 6, 7, 10, 3)]),
    # held out (test_families only)
    "lookup": Family(("d", "k"), "def {fn}({d}, {k}):\n    {line}\n", "return {d}[{k}]", "return {d}.get({k}, 0)",
                     "should return the count stored for {k} in {d}, or 0 when there is none",
                     lambda r: [((d, k), d.get(k, 0)) for d, k in (({"a": 2}, "a"), ({"a": 2}, "b"), ({}, "c"),
                                                                   ({"x": 5, "y": 1}, "y"), ({"q": 3}, "z"))]),
    "parse_int": Family(("s",), "def {fn}({s}):\n    try:\n        return int({s})\n    {line}\n        return None\n",
                        "except KeyError:", "except ValueError:",
                        "should turn {s} into an int, or give None when {s} is not a number",
                        lambda r: [((s,), int(s) if s.lstrip("-").isdigit() else None)
                                   for s in ("12", "x", "-4", "7a", "30")]),
    "join_commas": Family(("xs",), "def {fn}({xs}):\n    {line}\n", "return ' '.join({xs})", "return ','.join({xs})",
                          "should join the strings of {xs} with commas",
                          lambda r: [((v,), ",".join(v)) for v in (_words(r, n) for n in (2, 3, 1, 4, 2))]),
    "count_above": Family(("xs", "t"), "def {fn}({xs}, {t}):\n    {line}\n",
                          "return len([{x} for {x} in {xs} if {x} >= {t}])",
                          "return len([{x} for {x} in {xs} if {x} > {t}])",
                          "should count the items of {xs} strictly greater than {t}",
                          lambda r: [((v, 5), sum(1 for x in v if x > 5)) for v in ([5, 6], [1, 5, 9], [5], [7, 8, 5],
                                                                                     [2, 3])], ("x",)),
}
HELD_OUT = ("lookup", "parse_int", "join_commas", "count_above")
