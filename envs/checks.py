"""Scoring: state checks (bash, git) and hidden Python tests, run inside the episode's sandbox.

The check spec and the hidden tests are piped on stdin to a stdlib-only program started with
`python -I -S` (no workspace import path), so they never exist where the agent could read or edit them.
Results come back prefixed with a random nonce the agent never sees; lines without it do not count.
"""
from __future__ import annotations

import ast
import json
import secrets
from dataclasses import dataclass, field

from envs.programs import source
from envs.sandbox import Sandbox

CHECK_TYPES = {
    "file": ("path", "content"),
    "exists": ("path",),
    "absent": ("path",),
    "tar": ("path", "members"),
    "command": ("argv",),
    "output": ("text",),
}


@dataclass(frozen=True)
class CheckReport:
    reward: float
    passed: int
    total: int
    details: list[dict] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.reward == 1.0

    def as_dict(self) -> dict:
        return {"passed": self.passed, "total": self.total, "details": self.details}


def validate_checks(checks: object) -> str | None:
    """None if `checks` is a valid list of check specs, else what is wrong (for task-file errors)."""
    if not isinstance(checks, list) or not checks:
        return "expected a non-empty list of checks"
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or c.get("type") not in CHECK_TYPES:
            return f"check {i}: type must be one of {sorted(CHECK_TYPES)}"
        missing = [k for k in CHECK_TYPES[c["type"]] if k not in c]
        if missing:
            return f"check {i} ({c['type']}): missing {missing}"
    return None


def _parse(output: str, nonce: str) -> list:
    rows = []
    for line in output.splitlines():
        if line.startswith(nonce):
            rows.append(json.loads(line[len(nonce):]))
    return rows


def output_matches(check: dict, last_output: str, answer: str | None) -> bool:
    candidates = [last_output] + ([answer] if answer is not None else [])
    want = check["text"]
    for got in candidates:
        if check.get("match") == "lines":
            if sorted(x.strip() for x in got.splitlines() if x.strip()) == sorted(
                    x.strip() for x in want.splitlines() if x.strip()):
                return True
        elif check.get("match") == "first_token":
            if (got.split() or [""])[0] == want.strip():
                return True
        elif got.strip() == want.strip():
            return True
    return False


def run_state_checks(box: Sandbox, checks: list[dict], *, last_output: str = "",
                     answer: str | None = None) -> CheckReport:
    """All-or-nothing reward: 1.0 only if every check passes (partial credit would reward `rm -rf *`)."""
    details: list[dict] = []
    state = [c for c in checks if c["type"] != "output"]
    if state:
        nonce = secrets.token_hex(16)
        res = box.run([box.python, "-I", "-S", "-B", "-c", source("state_checker")],
                      stdin=json.dumps({"nonce": nonce, "checks": state}), timeout_s=20)
        rows = _parse(res.output, nonce)
        details = rows[0] if rows else [{"type": "checker", "ok": False, "detail": res.observation()[-300:]}]
    for c in checks:
        if c["type"] == "output":
            ok = output_matches(c, last_output, answer)
            details.append({"type": "output", "ok": ok, "detail": "output ok" if ok else "output differs"})
    passed = sum(1 for d in details if d["ok"])
    total = max(len(checks), 1)
    return CheckReport(1.0 if passed == total and len(details) == len(checks) else 0.0, passed, total, details)


def run_python_tests(box: Sandbox, suites: list[dict], *, timeout_s: float = 20.0,
                     discover: bool = False) -> CheckReport:
    """Run test suites ({name, source}); reward = fraction of tests that passed.

    discover=True also runs the workspace's own test_*.py files (the visible tests)."""
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "suites": suites, "workspace": box.path_inside, "per_test_s": 3, "discover": discover}
    res = box.run([box.python, "-I", "-S", "-B", "-c", source("test_runner")], stdin=json.dumps(spec),
                  timeout_s=timeout_s)
    rows_out = _parse(res.output, nonce)
    if discover:
        found = next((r["suites"] for r in rows_out if "suites" in r), [])
        suites = suites + [{"name": n, "source": ""} for n in found]
        if not found:
            return CheckReport(0.0, 0, 0, [])
    seen = {r["test"]: r for r in rows_out if "test" in r}
    # The expected tests come from parsing the sources here, so a run cut short counts what it skipped.
    rows = [seen.get(name) or {"test": name, "ok": False, "detail": "did not run: " + res.observation()[-200:]}
            for name in expected_tests(suites, list(seen))]
    passed = sum(1 for r in rows if r["ok"])
    return CheckReport(passed / len(rows) if rows else 0.0, passed, len(rows), rows)


def expected_tests(suites: list[dict], seen_names: list[str] = ()) -> list[str]:
    names: list[str] = []
    for suite in suites:
        if not suite["source"]:  # discovered in the sandbox: count what the runner reported
            names.extend(n for n in seen_names if n == suite["name"] or n.startswith(suite["name"] + "::"))
            continue
        try:
            tree = ast.parse(suite["source"])
        except SyntaxError:
            names.append(suite["name"])
            continue
        fns = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name.startswith("test")]
        names.extend(f"{suite['name']}::{f}" for f in fns) if fns else names.append(suite["name"])
    return names
