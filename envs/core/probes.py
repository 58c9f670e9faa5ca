"""Hidden tests split in two: the calls run next to the agent's code, the expected values never do.

A hidden test file (python_debug_env's `tests`) is Python with plain asserts, in test_* functions or at
the top of the module. Before it runs, every `assert` is cut into probes: each operand that is not a
literal becomes `__lachesis_probe__(k, <operand>)`, evaluated in the sandbox, whose repr comes back to
the caller; the literal operands and the comparison stay here. So the process that imports the agent's
module holds the inputs but not one expected value, and decides nothing: it can fake a result only by
computing it, which is solving the task (issue 11 item 1: a module that rewrote the runner's reporting
function, or read the expected values from its memory, scored 1.0 with its bug in place).

The rules this needs, checked when a task is loaded (`split_suite` raises `HiddenTestError`):
- an assert is a top-level statement of a test_* function or of the module, so it runs exactly once
  (one inside a loop, branch or helper could be skipped unseen);
- an assert compares against literals (`assert f(2) == 4`, `assert g() is None`, `assert h(1)`);
  operands are literals or expressions without comparisons or boolean operators (split `a and b`
  into two asserts), so no expected value travels inside an operand.
A value whose repr is not a Python literal (an object, a generator, inf) fails its assert.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

PROBE = "__lachesis_probe__"
MAX_REPR = 1 << 16  # a returned value larger than this fails its assert (and cannot flood the caller)

_OPS = {ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne), ast.Lt: ("<", operator.lt),
        ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt), ast.GtE: (">=", operator.ge),
        ast.Is: ("is", operator.is_), ast.IsNot: ("is not", operator.is_not),
        ast.In: ("in", lambda a, b: a in b), ast.NotIn: ("not in", lambda a, b: a not in b)}
_FUNCS = {name: fn for name, fn in _OPS.values()}
_MISSING = object()


class HiddenTestError(ValueError):
    """A hidden test this module cannot split (the message names the line)."""


@dataclass(frozen=True)
class Assertion:
    """One assert: operands (("lit", value) or ("probe", k)) joined by `ops`; ops () is truthiness, ("not",) its negation."""

    line: int
    operands: tuple[tuple[str, object], ...]
    ops: tuple[str, ...]

    def holds(self, values: dict[int, object]) -> bool:
        vals = [values[v] if kind == "probe" else v for kind, v in self.operands]
        if not self.ops:
            return bool(vals[0])
        if self.ops == ("not",):
            return not vals[0]
        return all(_FUNCS[op](a, b) for op, a, b in zip(self.ops, vals, vals[1:]))

    def probes(self) -> list[int]:
        return [v for kind, v in self.operands if kind == "probe"]


@dataclass(frozen=True)
class SplitSuite:
    """A hidden test file cut in two: `source` runs in the sandbox; the assertions stay with the caller."""

    name: str
    source: str  # the file with each assert replaced by its probes
    body: tuple[Assertion, ...]  # the module's own asserts (a failing body fails every test, as pytest's import would)
    tests: dict[str, tuple[Assertion, ...]]  # test name ("file::test_x", or the file for a plain file) -> asserts

    def test_names(self) -> list[str]:
        return list(self.tests) or [self.name]


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


class _Splitter:
    def __init__(self, name: str):
        self.name = name
        self.next_probe = 0

    def fail(self, node: ast.AST, why: str) -> HiddenTestError:
        return HiddenTestError(f"{self.name} line {getattr(node, 'lineno', '?')}: {why}")

    def operand(self, node: ast.expr, probes: list[ast.stmt]) -> tuple[str, object]:
        value = _literal(node)
        if value is not _MISSING:
            return ("lit", value)
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Compare, ast.BoolOp, ast.Lambda, ast.NamedExpr)):
                raise self.fail(node, "an assert operand may not hold a comparison, `and`/`or`, lambda or `:=` "
                                      "(split it into several asserts against literals)")
        k = self.next_probe
        self.next_probe += 1
        call = ast.Call(func=ast.Name(PROBE, ast.Load()), args=[ast.Constant(k), node], keywords=[])
        probes.append(ast.Expr(call))
        return ("probe", k)

    def assertion(self, node: ast.Assert) -> tuple[Assertion, list[ast.stmt]]:
        probes: list[ast.stmt] = []
        test = node.test
        if isinstance(test, ast.Compare):
            ops = []
            for op in test.ops:
                if type(op) not in _OPS:
                    raise self.fail(node, f"unsupported comparison {type(op).__name__}")
                ops.append(_OPS[type(op)][0])
            operands = [self.operand(x, probes) for x in [test.left, *test.comparators]]
            return Assertion(node.lineno, tuple(operands), tuple(ops)), probes
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return Assertion(node.lineno, (self.operand(test.operand, probes),), ("not",)), probes
        return Assertion(node.lineno, (self.operand(test, probes),), ()), probes

    def block(self, stmts: list[ast.stmt], where: str) -> tuple[list[ast.stmt], list[Assertion]]:
        """Replace the asserts that are direct statements of this block; refuse asserts nested deeper.
        At module level a function definition is left alone (split_suite handles each)."""
        out: list[ast.stmt] = []
        found: list[Assertion] = []
        for stmt in stmts:
            if isinstance(stmt, ast.Assert):
                a, probes = self.assertion(stmt)
                found.append(a)
                out.extend(probes or [ast.Pass()])
                continue
            if not (where == "module" and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))):
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Assert):
                        raise self.fail(sub, "an assert must be a top-level statement of a test function or "
                                             "of the module (one in a loop, branch or helper may not run)")
            out.append(stmt)
        return out, found


def split_suite(name: str, source: str) -> SplitSuite:
    """Cut a hidden test file into the sandbox's part and the caller's part (HiddenTestError if it cannot)."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as exc:
        raise HiddenTestError(f"{name}: not valid Python: {exc.msg} (line {exc.lineno})") from None
    sp = _Splitter(name)
    tests: dict[str, tuple[Assertion, ...]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test"):
                node.body, found = sp.block(node.body, "function")
                tests[f"{name}::{node.name}"] = tuple(found)
            elif any(isinstance(sub, ast.Assert) for sub in ast.walk(node)):
                raise sp.fail(node, "an assert must be a top-level statement of a test function or of the module "
                                    "(one in a helper may not run)")
    tree.body, body = sp.block(tree.body, "module")
    return SplitSuite(name, ast.unparse(ast.fix_missing_locations(tree)), tuple(body), tests)


def decode(text: object) -> object:
    """A probe's repr back into a value, or _MISSING (not a literal, too large, too deep)."""
    if not isinstance(text, str) or len(text) > MAX_REPR:
        return _MISSING
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def judge(suite: SplitSuite, frames: list[dict]) -> list[dict]:
    """One row per test ({test, ok, detail}) from the sandbox's frames, judged here.

    Frames: {"t": test, "p": k, "r": repr} per probe and {"t": test, "end": bool, "d": detail} per test
    (the module body reports as the file's name). A test passes only if its body and itself ended
    cleanly once, each of their probes came exactly once with a literal value, and every assert holds;
    anything missing, repeated or malformed fails it."""
    values: dict[tuple[str, int], list[object]] = {}
    ends: dict[str, list[tuple[bool, str]]] = {}
    for f in frames:
        t = f.get("t")
        if not isinstance(t, str):
            continue
        if "p" in f:
            values.setdefault((t, f["p"]), []).append(decode(f.get("r")))
        elif "end" in f:
            ends.setdefault(t, []).append((f["end"] is True, str(f.get("d", ""))[-300:]))

    def verdict(test: str, asserts: tuple[Assertion, ...]) -> tuple[bool, str]:
        end = ends.get(test, [])
        if len(end) != 1:
            return False, "did not run" if not end else "reported more than once"
        if not end[0][0]:
            return False, end[0][1] or "failed"
        got: dict[int, object] = {}
        for a in asserts:
            for k in a.probes():
                seen = values.get((test, k), [])
                if len(seen) != 1 or seen[0] is _MISSING:
                    why = "not evaluated" if not seen else "reported more than once" if len(seen) > 1 \
                        else "not a literal value"
                    return False, f"line {a.line}: {why}"
                got[k] = seen[0]
            try:
                ok = a.holds(got)
            except TypeError:  # e.g. `<` between a str and an int: the assert fails, as it would in Python
                ok = False
            if not ok:
                shown = ", ".join(repr(got[k])[:80] for k in a.probes())
                return False, f"line {a.line}: assert failed" + (f" (got {shown})" if shown else "")
        return True, ""

    body_ok, body_detail = verdict(suite.name, suite.body)
    rows = []
    for test in suite.test_names():
        if test == suite.name:
            ok, detail = body_ok, body_detail
        elif not body_ok:
            ok, detail = False, f"module: {body_detail}"
        else:
            ok, detail = verdict(test, suite.tests[test])
        rows.append({"test": test, "ok": ok, "detail": detail})
    return rows
