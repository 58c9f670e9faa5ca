"""python_debug_env: a workspace with a buggy Python module, a visible test and a task statement.

Tools read and write files, replace text in a file and run the visible tests; `submit` runs the hidden
tests (piped to the runner, never written to the workspace, split so that the expected values stay with
the caller: envs/core/probes.py). Reward = fraction of hidden tests passing.
"""
from __future__ import annotations

import builtins
import keyword
import sys

from envs.core.base import ToolEnv
from envs.core.checks import CheckReport, run_hidden_tests, run_visible_tests
from envs.core.pools import PoolsBySplit, vocabulary
from envs.core.probes import HiddenTestError, split_suite
from envs.core.task_suite import Suite, builtin_id, rng_for
from envs.core.tasks import FAMILY_SPLIT, Task, pool_split
from envs.core.tools import SUBMIT_SCHEMA, ToolArgumentError, ToolFailed, str_arg, tool_schema
from envs.families.python_families import HELD_OUT, MORE_FAMILIES, Family, ints as _ints
from envs.sandbox.sandbox import Sandbox, safe_relpath
from transcript.toolcalls import ToolCall

ENV = "python_debug_env"
TRAIN_TASKS, TEST_TASKS, FAMILY_TASKS = 3000, 100, 100
MAX_FILE_BYTES = 1 << 20  # what replace_in_file can edit
HIDDEN = "hidden_tests.py"  # the name the hidden tests run under (never a file in the workspace)


FAMILIES: dict[str, Family] = {
    "sum": Family(("xs",), "def {fn}({xs}):\n    {acc} = 0\n    for {x} in {xs}:\n        {line}\n    return {acc}\n",
                  "{acc} -= {x}", "{acc} += {x}", "should return the sum of {xs}",
                  lambda r: [((v,), sum(v)) for v in (_ints(r, r.randint(2, 5)) for _ in range(5))], ("acc", "x")),
    "count": Family(("xs", "v"), "def {fn}({xs}, {v}):\n    {acc} = 0\n    for {x} in {xs}:\n        {line}\n"
                    "            {acc} += 1\n    return {acc}\n",
                    "if {x} != {v}:", "if {x} == {v}:", "should count how often {v} occurs in {xs}",
                    lambda r: [((v, v[0]), v.count(v[0])) for v in (_ints(r, r.randint(3, 6), 1, 3) for _ in range(5))],
                    ("acc", "x")),
    "range_sum": Family(("n",), "def {fn}({n}):\n    {line}\n", "return sum(range(1, {n}))",
                        "return sum(range(1, {n} + 1))", "should return 1 + 2 + ... + {n}",
                        lambda r: [((n,), n * (n + 1) // 2) for n in r.sample(range(2, 30), 5)]),
    "max": Family(("xs",), "def {fn}({xs}):\n    {line}\n    for {x} in {xs}:\n        if {x} > {best}:\n"
                  "            {best} = {x}\n    return {best}\n",
                  "{best} = 0", "{best} = {xs}[0]", "should return the largest item of {xs}",
                  lambda r: [((v,), max(v)) for v in (_ints(r, r.randint(2, 5), -9, -1) for _ in range(5))],
                  ("best", "x")),
    "clamp": Family(("x", "lo", "hi"), "def {fn}({x}, {lo}, {hi}):\n    {line}\n",
                    "return min({lo}, max({hi}, {x}))", "return max({lo}, min({hi}, {x}))",
                    "should limit {x} to the range {lo}..{hi}",
                    lambda r: [((x, 3, 7), max(3, min(7, x))) for x in (1, 8, 9, 5, 6)]),
    "last_n": Family(("xs", "n"), "def {fn}({xs}, {n}):\n    {line}\n", "return {xs}[{n}:]", "return {xs}[-{n}:]",
                     "should return the last {n} items of {xs}",
                     lambda r: [((v, k), v[-k:]) for v, k in ((_ints(r, 6), r.randint(1, 2)) for _ in range(5))]),
    "reverse_words": Family(("s",), "def {fn}({s}):\n    {line}\n", "return ' '.join({s}.split())",
                            "return ' '.join(reversed({s}.split()))", "should reverse the order of the words in {s}",
                            lambda r: [((s,), " ".join(reversed(s.split()))) for s in
                                       ("a b", "x y z", "one two", "p q r s", "up down")]),
    "average": Family(("xs",), "def {fn}({xs}):\n    {line}\n", "return sum({xs}) / (len({xs}) - 1)",
                      "return sum({xs}) / len({xs})", "should return the mean of {xs}",
                      lambda r: [((v,), sum(v) / len(v)) for v in (_ints(r, r.randint(2, 5)) for _ in range(5))]),
    "scale": Family(("xs", "k"), "def {fn}({xs}, {k}):\n    {line}\n", "return [{x} + {k} for {x} in {xs}]",
                    "return [{x} * {k} for {x} in {xs}]", "should multiply every item of {xs} by {k}",
                    lambda r: [((v, k), [x * k for x in v]) for v, k in ((_ints(r, 3), r.randint(3, 9))
                                                                          for _ in range(5))], ("x",)),
    "is_even": Family(("n",), "def {fn}({n}):\n    {line}\n", "return {n} % 2 == 1", "return {n} % 2 == 0",
                      "should tell whether {n} is even", lambda r: [((n,), n % 2 == 0) for n in (2, 4, 10, 7, 6)]),
    "factorial": Family(("n",), "def {fn}({n}):\n    {acc} = 1\n    for {i} in range(2, {n} + 1):\n        {line}\n"
                        "    return {acc}\n", "{acc} += {i}", "{acc} *= {i}", "should return the factorial of {n}",
                        lambda r: [((n,), _fact(n)) for n in (4, 5, 6, 7, 8)], ("acc", "i")),
    **MORE_FAMILIES,
}


def _fact(n: int) -> int:
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out


PHRASINGS = ["{fn} in {mod}.py is buggy: it {hint}. Fix it.",
             "Fix the bug in {mod}.py: {fn} {hint}.",
             "The function {fn} ({mod}.py) {hint}, but it does not. Repair it.",
             "Debug {mod}.py so that {fn} {hint}.", "In {mod}.py, {fn} {hint}; correct the code.",
             "Something is wrong with {fn} in {mod}.py: it {hint}. Make it right.",
             "Patch {fn} ({mod}.py). Expected behaviour: it {hint}."]
# No hint: the failing visible test is what says what is wrong, so the expert runs the tests first.
TESTS_FIRST = ["The test in test_{mod}.py fails. Find out why and fix {mod}.py.",
               "Make test_{mod}.py pass by fixing the bug in {mod}.py.",
               "Run the tests, read the failure and repair {fn} in {mod}.py.",
               "test_{mod}.py is failing; fix {mod}.py (not the test)."]
SYSTEM_PROMPT = "You are a Python debugging agent. Use the tools to fix the code, then call submit."
_CODE_TEXT = " ".join(f.code + f.bug + f.fix + f.hint for f in FAMILIES.values())
STOPWORDS = vocabulary(*PHRASINGS, *TESTS_FIRST, SYSTEM_PROMPT, _CODE_TEXT, " ".join(keyword.kwlist),
                       " ".join(dir(builtins)), " ".join(sys.stdlib_module_names), "test assert import from def return py passed failed "
                       "error tool submit read file write replace run tests AssertionError")
_pools = PoolsBySplit(STOPWORDS)


def _test_source(mod: str, fn: str, cases: list[tuple[tuple, object]]) -> str:
    body = [f"from {mod} import {fn}", ""]
    for i, (args, want) in enumerate(cases, start=1):
        body += [f"def test_{fn}_{i}():", f"    assert {fn}({', '.join(map(repr, args))}) == {want!r}", ""]
    return "\n".join(body)


def generate(split: str, index: int, template: str) -> Task:
    rng = rng_for(ENV, split, index)
    fam = FAMILIES[template]
    p = _pools(pool_split(split))
    names = p.distinct(p.identifier, rng, 3 + len(fam.args) + len(fam.extra))
    mod, fn = names[0], names[1]
    slots = {"mod": mod, "fn": fn, **dict(zip(fam.args + fam.extra, names[2:]))}
    line_bug, line_fix = fam.bug.format(**slots), fam.fix.format(**slots)
    code = fam.code.format(line=line_bug, **slots)
    cases = fam.cases(rng)
    visible, hidden = cases[:1], cases[1:]
    hint = fam.hint.format(**slots)
    tests_first = rng.random() < 0.25
    instruction = rng.choice(TESTS_FIRST if tests_first else PHRASINGS).format(fn=fn, mod=mod, hint=hint)
    files = {f"{mod}.py": code, f"test_{mod}.py": _test_source(mod, fn, visible)}
    solution = [{"name": "run_tests", "arguments": {}}] * tests_first + [
                {"name": "read_file", "arguments": {"path": f"{mod}.py"}},
                {"name": "replace_in_file", "arguments": {"path": f"{mod}.py", "old": line_bug, "new": line_fix}},
                {"name": "run_tests", "arguments": {}}]
    return Task(task_id=builtin_id(ENV, split, index), instruction=instruction, files=files, solution=solution,
                checker={"tests": _test_source(mod, fn, hidden)}, env=ENV, split=split, template=template,
                slots={"mod": mod, "fn": fn}, source="builtin")


class PythonDebugEnv(ToolEnv):
    env_name = ENV
    system_prompt = SYSTEM_PROMPT
    tools = [
        tool_schema("read_file", "Show a file of the workspace.", {"path": "relative path"}),
        tool_schema("write_file", "Replace a file's whole content.", {"path": "relative path", "content": "text"}),
        tool_schema("replace_in_file", "Replace one exact snippet in a file.",
                    {"path": "relative path", "old": "text to find", "new": "replacement"}),
        tool_schema("run_tests", "Run the visible tests (test_*.py).", {}),
        SUBMIT_SCHEMA,
    ]

    @classmethod
    def builtin_suite(cls) -> Suite:
        return Suite(ENV, {"train": TRAIN_TASKS, "test": TEST_TASKS, FAMILY_SPLIT: FAMILY_TASKS}, generate,
                     template_names=tuple(FAMILIES), held_out=HELD_OUT)

    def validate_task(self, task: Task) -> tuple[str, str] | None:
        tests = task.checker.get("tests")
        if not isinstance(tests, str) or not tests.strip():
            return ("tests", "python_debug_env needs hidden test source (a string)")
        try:
            split_suite(HIDDEN, tests)  # the hidden tests must split into calls and expected values (probes.py)
        except HiddenTestError as exc:
            return ("tests", str(exc).removeprefix(HIDDEN + ": "))
        return None

    # Files are read and written by processes inside the sandbox, never by this process: an agent-made
    # symlink can then only point inside the sandbox's own view.
    def _read(self, box: Sandbox, path: str) -> tuple[str | None, str]:
        res = box.run(["cat", "--", path], output_bytes=MAX_FILE_BYTES)
        if res.truncated:
            return None, f"{path} is larger than {MAX_FILE_BYTES} bytes"
        return (res.output, "") if res.ok else (None, res.observation())

    def _write(self, box: Sandbox, path: str, content: str) -> str:
        res = box.run(["/bin/sh", "-c", 'cat > "$1"', "sh", path], stdin=content)
        if not res.ok:
            raise ToolFailed(f"error: {res.observation()}")
        return f"wrote {path}"

    def call_tool(self, box: Sandbox, call: ToolCall) -> str:
        if call.name == "run_tests":
            return self._run_tests(box)
        try:
            path = safe_relpath(str_arg(call, "path"))
        except ValueError as exc:
            raise ToolArgumentError(str(exc)) from None
        if call.name == "read_file":
            text, err = self._read(box, path)
            if text is None:
                raise ToolFailed(f"error: {err}")
            limit = self.limits.output_bytes
            return text if len(text) <= limit else text[:limit] + "\n[output truncated]"
        if call.name == "write_file":
            return self._write(box, path, str_arg(call, "content", allow_empty=True))
        if call.name == "replace_in_file":
            old, new = str_arg(call, "old"), str_arg(call, "new", allow_empty=True)
            text, err = self._read(box, path)
            if text is None:
                raise ToolFailed(f"error: {err}")
            count = text.count(old)
            if count != 1:
                raise ToolFailed(f"error: the snippet occurs {count} times in {path}; it must occur exactly once")
            return self._write(box, path, text.replace(old, new))
        raise ToolArgumentError(f"unknown tool {call.name!r}")

    def _run_tests(self, box: Sandbox) -> str:
        report = run_visible_tests(box)
        if report.total == 0:
            return "no test_*.py files"
        failed = [r for r in report.details if not r["ok"]]
        lines = [f"{report.passed} passed, {len(failed)} failed"]
        lines += [f"FAILED {r['test']}: {r['detail']}" for r in failed[:5]]
        return "\n".join(lines)

    def score(self, box: Sandbox, task: Task, *, last_output: str, answer: str | None) -> CheckReport:
        return run_hidden_tests(box, [{"name": HIDDEN, "source": task.checker["tests"]}])
