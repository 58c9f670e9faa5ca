"""Scoring: state checks (bash, git) and hidden Python tests, observed inside the episode's sandbox and
judged here.

The sandbox side is a stdlib-only program started with `python -I -S` (no workspace import path) that gets
its input on stdin, so nothing of the checker exists on disk where the agent could read or edit it. It
gets where to look and what to call, never what to expect: file contents, outputs, exit codes and test
expectations stay in this process, which compares (issue 11 item 1). Answers come back prefixed with a
random nonce; lines without it do not count, and a missing, repeated or malformed answer fails.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import shutil
from dataclasses import dataclass, field

from envs.core.probes import judge, split_suite
from envs.sandbox.limits import RunResult
from envs.sandbox.programs import source
from envs.sandbox.sandbox import Sandbox

# The checker's environment: nothing of the agent's (no workspace HOME, no PATH entry it could plant a
# binary in), and git told to run nothing a repository's own config or attributes name (hooks, fsmonitor,
# signature programs, pagers, an external diff: `diff.external` empty makes `git diff` fail, not run it);
# replace refs and grafts are ignored. Drivers under names the repository chooses (diff.<name>.textconv and
# .command, filter.<name>.clean/smudge/process, merge.<name>.driver) are found and emptied by the state
# checker itself for each git command it runs (envs/sandbox/programs/state_checker.py).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
GIT = shutil.which("git", path=SYSTEM_PATH) or "git"
_GIT_OVERRIDES = {
    "core.fsmonitor": "false", "core.hooksPath": "/dev/null", "safe.directory": "*", "core.pager": "cat",
    "core.attributesFile": "/dev/null", "log.showSignature": "false", "gpg.program": "/bin/false",
    "gpg.openpgp.program": "/bin/false", "gpg.x509.program": "/bin/false", "gpg.ssh.program": "/bin/false",
    "core.sshCommand": "/bin/false", "credential.helper": "", "diff.external": "",
    "advice.graftFileDeprecated": "false",
}
CHECKER_ENV = {
    "PATH": SYSTEM_PATH, "HOME": "/nonexistent", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": "/dev/null", "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "GIT_CONFIG_COUNT": str(len(_GIT_OVERRIDES)),
    **{f"GIT_CONFIG_{kind}_{i}": kv for i, (k, v) in enumerate(_GIT_OVERRIDES.items())
       for kind, kv in (("KEY", k), ("VALUE", v))},
}

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


def _frames(output: str, nonce: str) -> list:
    """The checker's nonce-prefixed JSON lines; a line that does not parse is skipped (it decides nothing)."""
    rows = []
    for line in output.splitlines():
        if line.startswith(nonce):
            try:
                rows.append(json.loads(line[len(nonce):]))
            except ValueError:
                continue
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
        elif check.get("match") == "last_token":  # `uniq -c | sort -rn | head -n 1` prints "  5 word"
            if (got.split() or [""])[-1] == want.strip():
                return True
        elif got.strip() == want.strip():
            return True
    return False


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# What the checker may see of each check: where to look, never what to expect.
_OBSERVED_KEYS = {"type", "path", "argv"}


def _judge_state(c: dict, seen: object) -> tuple[bool, str]:
    """Compare one observation from the sandbox with the check's expected values (held only here)."""
    if not isinstance(seen, dict):
        return False, f"{c['type']}: no observation"
    if "error" in seen:
        return False, f"{c.get('path') or ' '.join(c.get('argv', []))}: {str(seen['error'])[:200]}"
    kind, path = c["type"], c.get("path", "")
    if kind == "file":
        if seen.get("kind") != "file":
            return False, f"{path}: no such file"
        ok = seen.get("sha") == _digest(c["content"]) or (
            bool(c.get("strip")) and seen.get("sha_strip") == _digest(c["content"].strip()))
        return ok, f"{path}: content {'ok' if ok else 'differs'}"
    if kind == "exists":
        want = c.get("kind", "any")
        ok = seen.get("lexists") is True and (want == "any" or (want == "file" and seen.get("isfile") is True)
                                              or (want == "dir" and seen.get("isdir") is True))
        return ok, f"{path}: {'exists' if ok else 'missing'}"
    if kind == "absent":
        ok = seen.get("lexists") is False
        return ok, f"{path}: {'absent' if ok else 'still exists'}"
    if kind == "tar":
        names = seen.get("members")
        if not isinstance(names, list):
            return False, f"{path}: no such archive"
        missing = [m for m in c["members"] if m not in set(names)]
        if missing:
            return False, f"{path}: missing {missing}"
        extra = sorted(set(names) - set(c["members"])) if c.get("exact") else []
        return not extra, f"{path}: unexpected {extra[:5]}" if extra else f"{path}: members ok"
    if kind == "command":
        shown = " ".join(c["argv"])
        if "returncode" in c and seen.get("rc") != c["returncode"]:
            return False, f"{shown}: exit {seen.get('rc')}"
        if c.get("stdout") is not None and seen.get("sha") != _digest(c["stdout"].strip()):
            return False, f"{shown}: got {str(seen.get('excerpt', ''))!r}"
        return True, f"{shown}: ok"
    return False, f"unknown check type {kind!r}"


def _observed(c: dict) -> dict:
    out = {k: v for k, v in c.items() if k in _OBSERVED_KEYS}
    if c["type"] == "command" and out["argv"] and out["argv"][0] == "git":
        out["argv"] = [GIT] + list(out["argv"][1:])
    return out


def run_state_checks(box: Sandbox, checks: list[dict], *, last_output: str = "",
                     answer: str | None = None) -> CheckReport:
    """All-or-nothing reward: 1.0 only if every check passes (partial credit would reward `rm -rf *`).

    The sandbox only observes (state_checker.py, in a clean environment); the comparison happens here."""
    details: list[dict] = []
    state = [c for c in checks if c["type"] != "output"]
    if state:
        nonce = secrets.token_hex(16)
        res = box.run([box.python, "-I", "-S", "-B", "-c", source("state_checker")],
                      stdin=json.dumps({"nonce": nonce, "checks": [_observed(c) for c in state]}), timeout_s=20,
                      env=CHECKER_ENV, output_bytes=1 << 20)
        frames = _frames(res.output, nonce)
        # Exactly one well-formed answer, one observation per check; anything else fails every state check.
        seen = frames[0] if len(frames) == 1 and isinstance(frames[0], list) and len(frames[0]) == len(state) \
            else None
        for i, c in enumerate(state):
            if seen is None:
                ok, detail = False, "checker: " + res.observation()[-300:]
            else:
                ok, detail = _judge_state(c, seen[i])
            details.append({"type": c["type"], "ok": ok, "detail": detail})
    for c in checks:
        if c["type"] == "output":
            ok = output_matches(c, last_output, answer)
            details.append({"type": "output", "ok": ok, "detail": "output ok" if ok else "output differs"})
    passed = sum(1 for d in details if d["ok"])
    total = max(len(checks), 1)
    return CheckReport(1.0 if passed == total and len(details) == len(checks) else 0.0, passed, total, details)


def _runner(box: Sandbox, suites: list[dict], *, discover: bool, timeout_s: float) -> tuple[list[dict], RunResult]:
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "suites": suites, "workspace": box.path_inside, "per_test_s": 3, "discover": discover}
    res = box.run([box.python, "-I", "-S", "-B", "-c", source("test_runner")], stdin=json.dumps(spec),
                  timeout_s=timeout_s, output_bytes=1 << 20)
    return [f for f in _frames(res.output, nonce) if isinstance(f, dict)], res


def run_hidden_tests(box: Sandbox, suites: list[dict], *, timeout_s: float = 20.0) -> CheckReport:
    """The reward of python_debug_env: hidden test files ({name, source}), split (probes.py) so the process
    that runs the agent's code gets the calls but no expected value; reward = fraction of tests passing."""
    split = [split_suite(s["name"], s["source"]) for s in suites]
    frames, res = _runner(box, [{"name": s.name, "source": s.source} for s in split], discover=False,
                          timeout_s=timeout_s)
    rows: list[dict] = []
    for s in split:
        rows += judge(s, [f for f in frames if f.get("t") == s.name or str(f.get("t", "")).startswith(s.name + "::")])
    for r in rows:
        if r["detail"] == "did not run":
            r["detail"] += ": " + res.observation()[-200:]
    passed = sum(1 for r in rows if r["ok"])
    return CheckReport(passed / len(rows) if rows else 0.0, passed, len(rows), rows)


def run_visible_tests(box: Sandbox, *, timeout_s: float = 20.0) -> CheckReport:
    """The workspace's own test_*.py files, run next to the agent's code: feedback for the agent, never a
    reward (the agent's module can rewrite what this reports)."""
    frames, res = _runner(box, [], discover=True, timeout_s=timeout_s)
    found = next((f["suites"] for f in frames if isinstance(f.get("suites"), list)), [])
    ends = {f["t"]: f for f in frames if isinstance(f.get("t"), str) and "end" in f}
    rows = []
    for name in found:
        body = ends.get(name)
        tests = [t for t in ends if t.startswith(name + "::")]
        if body is None:
            rows.append({"test": name, "ok": False, "detail": "did not run: " + res.observation()[-200:]})
        elif body["end"] is not True or not tests:  # a file whose body fails is one failure, as an import error
            rows.append({"test": name, "ok": body["end"] is True, "detail": str(body.get("d", ""))})
        else:
            rows += [{"test": t, "ok": ends[t]["end"] is True, "detail": str(ends[t].get("d", ""))} for t in tests]
    passed = sum(1 for r in rows if r["ok"])
    return CheckReport(passed / len(rows) if rows else 0.0, passed, len(rows), rows)
