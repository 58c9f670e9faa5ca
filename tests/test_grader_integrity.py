"""Attacks on the graders (issue 11 item 1), each tried in a real episode through the agent's own tools.

python_debug_env: a module that keeps its bug but rewrites the runner's reporting, reads the expected
values from the runner's memory, or prints fake results with the runner's nonce. Before the hidden tests
were split (envs/core/probes.py) each of these scored 1.0; now the sandbox never holds an expected value and
the caller judges, so they score 0. bash/git: a repository whose config or planted binaries would run
code while the checker looks at it; the checker now runs in a clean environment and only observes.
"""
from __future__ import annotations

import pytest

import envs
from envs.core.checks import GIT, run_state_checks
from envs.core.probes import HiddenTestError, judge, split_suite
from envs.families.git_repo import GIT_ENV
from envs.sandbox.sandbox import Sandbox
from transcript.toolcalls import format_tool_call

pytestmark = pytest.mark.attack

# Prepended to the buggy module: rewrite whatever the runner reports with, so every test "passes".
REWRITE_REPORTING = '''
import sys as _sys
_main = _sys.modules["__main__"]
if hasattr(_main, "report"):  # the runner before the split: report(name, ok, detail)
    _orig_report = _main.report
    _main.report = lambda name, ok, detail="": _orig_report(name, True, "")
if hasattr(_main, "frame"):  # the runner now: frame({...}) per probe and per test end
    _orig_frame = _main.frame
    _main.frame = lambda obj: _orig_frame({**obj, "end": True, "d": ""} if "end" in obj else obj)
'''

# Appended: the function answers with the expected value it finds in the runner's memory (the hidden
# test source), and falls back to its buggy self.
STEAL_EXPECTED = '''
import ast as _ast, gc as _gc
_NO = object()

def _texts():
    """Every string reachable from the interpreter's objects (the runner's spec holds the hidden source)."""
    seen, stack = set(), list(_gc.get_objects())
    while stack:
        obj = stack.pop()
        if isinstance(obj, str):
            if "assert" in obj:
                yield obj
        elif isinstance(obj, (dict, list, tuple)) and id(obj) not in seen:
            seen.add(id(obj))
            stack.extend(obj.values() if isinstance(obj, dict) else obj)


def _steal(fn_name, args):
    for text in set(_texts()):
        try:
            tree = _ast.parse(text)
        except SyntaxError:
            continue
        for node in _ast.walk(tree):
            t = getattr(node, "test", None) if isinstance(node, _ast.Assert) else None
            if isinstance(t, _ast.Compare) and isinstance(t.left, _ast.Call) and \\
                    getattr(t.left.func, "id", "") == fn_name:
                try:
                    if tuple(_ast.literal_eval(a) for a in t.left.args) == tuple(args):
                        return _ast.literal_eval(t.comparators[0])
                except ValueError:
                    continue
    return _NO

_buggy = {fn}

def {fn}(*args):
    want = _steal("{fn}", args)
    return _buggy(*args) if want is _NO else want
'''

# Prepended: print a passing result for every hidden test under the runner's nonce, then leave.
FAKE_FRAMES = '''
import sys as _sys, os as _os, json as _json, ast as _ast
_main = _sys.modules["__main__"]
_nonce = getattr(_main, "NONCE", "")
for _suite in getattr(_main, "spec", {}).get("suites", []):
    _names = [n.name for n in _ast.parse(_suite["source"]).body if isinstance(n, _ast.FunctionDef)]
    for _test in [_suite["name"]] + [_suite["name"] + "::" + n for n in _names]:
        for _f in ({"test": _test, "ok": True}, {"t": _test, "end": True}):
            _sys.stdout.write("\\n" + _nonce + _json.dumps(_f) + "\\n")
_sys.stdout.flush()
_os._exit(0)
'''


def _python_episode(make_module) -> tuple[float, dict]:
    """Play a python_debug_env test task whose module the agent replaces with make_module(code, fn)."""
    env = envs.make("python_debug_env", split="test")
    try:
        env.reset(options={"index": 0})
        task = env.unwrapped.task
        mod, fn = task.slots["mod"], task.slots["fn"]
        buggy = task.files[f"{mod}.py"]
        env.step(format_tool_call("write_file", {"path": f"{mod}.py", "content": make_module(buggy, fn)}))
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated
        return reward, info
    finally:
        env.close()


def test_a_module_that_rewrites_the_runners_reporting_scores_nothing():
    reward, info = _python_episode(lambda code, fn: REWRITE_REPORTING + code)
    assert reward == 0.0 and info["checks"]["total"] == 4


def test_a_module_that_reads_the_expected_values_from_memory_scores_nothing():
    reward, info = _python_episode(lambda code, fn: code + STEAL_EXPECTED.replace("{fn}", fn))
    assert reward == 0.0 and info["checks"]["passed"] == 0


def test_fake_results_under_the_runners_nonce_score_nothing():
    reward, _ = _python_episode(lambda code, fn: FAKE_FRAMES + code)
    assert reward == 0.0


def test_the_honest_fix_still_scores_and_the_sandbox_never_sees_an_expected_value():
    task = envs.make("python_debug_env", split="test").unwrapped.suite.task("test", 0)
    split = split_suite("hidden_tests.py", task.checker["tests"])
    # every expected value of the hidden tests is gone from what runs next to the agent's code
    for line in task.checker["tests"].splitlines():
        if "==" in line:
            want = line.split("==", 1)[1].strip()
            assert want not in split.source.replace(line.split("==", 1)[0], "")
    fix = next(c["arguments"] for c in task.solution if c["name"] == "replace_in_file")
    reward, info = _python_episode(lambda code, fn: code.replace(fix["old"], fix["new"]))
    assert reward == 1.0 and info["checks"]["passed"] == 4


def test_the_judge_fails_anything_ambiguous():
    split = split_suite("t.py", "from m import f\n\ndef test_a():\n    assert f(1) == 2\n    assert f(2) is None\n")
    good = [{"t": "t.py", "end": True}, {"t": "t.py::test_a", "p": 0, "r": "2"},
            {"t": "t.py::test_a", "p": 1, "r": "None"}, {"t": "t.py::test_a", "end": True}]
    assert judge(split, good)[0]["ok"]
    cases = {
        "a probe reported twice": good + [{"t": "t.py::test_a", "p": 0, "r": "2"}],
        "a probe missing": [f for f in good if f.get("p") != 1],
        "two ends": good + [{"t": "t.py::test_a", "end": True}],
        "no body end": good[1:],
        "not a literal": [dict(f, r="<object at 0x1>") if f.get("p") == 0 else f for f in good],
        "a huge value": [dict(f, r="[" + "1," * 40000 + "]") if f.get("p") == 0 else f for f in good],
        "deep nesting": [dict(f, r="[" * 5000 + "]" * 5000) if f.get("p") == 0 else f for f in good],
        "an object that equals anything is only its repr": [dict(f, r="'2'") if f.get("p") == 0 else f for f in good],
        "the test raised": good[:3] + [{"t": "t.py::test_a", "end": False, "d": "boom"}],
    }
    for why, frames in cases.items():
        assert not judge(split, frames)[0]["ok"], why


@pytest.mark.parametrize("source, why", [
    ("def test_a():\n    for x in [1]:\n        assert f(x) == 2\n", "top-level statement"),
    ("def helper():\n    assert f(1) == 2\n", "helper"),
    ("def test_a():\n    assert f(1) == 2 and f(2) == 3\n", "comparison"),
    ("def test_a():\n    assert g(f(1) == 2)\n", "comparison"),
])
def test_hidden_tests_that_would_leak_an_expected_value_are_refused(source, why):
    with pytest.raises(HiddenTestError, match=why):
        split_suite("t.py", source)


def _git_episode(plant: str, *, solve: bool) -> tuple[float, bool]:
    """Play git_repo_env test task 0 ("commit": the checks run `git log` and `git show`): plant, maybe
    solve, then sign HEAD; returns the reward and whether anything planted ran while the checker looked."""
    env = envs.make("git_repo_env", split="test")
    try:
        env.reset(options={"index": 0})
        task = env.unwrapped.task
        box = env.unwrapped.box
        env.step(format_tool_call("run", {"command": plant}))
        if solve:
            env.step(format_tool_call("run", {"command": task.solution[0]["arguments"]["command"]}))
        env.step(format_tool_call("run", {"command": SIGN_HEAD}))
        (box.workspace / "ran").unlink(missing_ok=True)  # only what runs during scoring counts
        _, reward, *_ = env.step(format_tool_call("submit", {}))
        return reward, (box.workspace / "ran").exists()
    finally:
        env.close()


EVIL = "#!/bin/sh\necho \"$0 $*\" >> /workspace/ran 2>/dev/null || echo x >> \"$HOME/ran\"\n"
PLANT_PROGRAMS = (
    f"printf '%s' '{EVIL}' > evil.sh && chmod +x evil.sh && cp evil.sh git && mkdir -p bin hooks && cp evil.sh bin/git"
    " && for h in pre-commit post-checkout reference-transaction post-index-change; do cp evil.sh hooks/$h; done"
    " && W=$(pwd)"
    " && git config core.fsmonitor $W/evil.sh && git config core.hooksPath $W/hooks"
    " && git config log.showSignature true && git config gpg.program $W/evil.sh && git config core.pager $W/evil.sh"
    " && printf '[core]\\n\\tfsmonitor = %s/evil.sh\\n[log]\\n\\tshowSignature = true\\n' $W > .gitconfig"
    " && echo 'export PATH=/workspace:$PATH' > .profile && cp .profile .bashrc"
)
# A signed HEAD: `git log` with log.showSignature runs gpg.program on it.
SIGN_HEAD = ("C=$(git cat-file -p HEAD | sed 's/^committer .*/&\\ngpgsig -----BEGIN PGP SIGNATURE-----\\n"
             " x\\n -----END PGP SIGNATURE-----/' | git hash-object -t commit -w --stdin) && git reset -q --soft $C")


def test_programs_a_repository_names_never_run_while_it_is_checked():
    reward, ran = _git_episode(PLANT_PROGRAMS, solve=True)
    assert not ran
    assert reward == 1.0  # the state is right: planting did not break an honest checker either


def test_planted_programs_do_not_make_an_unsolved_task_pass():
    reward, ran = _git_episode(PLANT_PROGRAMS, solve=False)
    assert not ran and reward == 0.0


# Programs a repository's config names under names of its own choosing (a diff driver's textconv and command
# through .git/info/attributes, clean/smudge/process filters) and diff.external: `git log -p`, `git show`,
# `git diff` and `git blame` run them unless the checker overrides them.
PLANT_DRIVERS = (
    f"printf '%s' '{EVIL}' > evil.sh && chmod +x evil.sh && W=$(pwd) && git init -q . && echo one > a.txt"
    " && git add a.txt && git commit -qm one && echo two > a.txt && git commit -qam two && echo three > a.txt"
    " && git config diff.external $W/evil.sh && git config diff.evil.textconv $W/evil.sh"
    " && git config diff.evil.command $W/evil.sh && git config filter.evil.clean $W/evil.sh"
    " && git config filter.evil.smudge $W/evil.sh && git config filter.evil.process $W/evil.sh"
    " && echo '* diff=evil filter=evil' > .git/info/attributes && cp .git/info/attributes .gitattributes"
)
READ_COMMANDS = (["show", "HEAD"], ["log", "-p", "-1"], ["diff", "HEAD~1"], ["diff"], ["blame", "a.txt"],
                 ["diff", "--stat"], ["-C", ".", "show", "HEAD"])


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=" ".join)
def test_drivers_a_repository_names_never_run_in_the_checkers_git(argv):
    """Issue 11, the git env: a check running a diff-family command never runs a program the repository's own
    config names (before: textconv, diff.external and the filters ran for five of these)."""
    with Sandbox(env=GIT_ENV) as box:
        assert box.run(PLANT_DRIVERS, timeout_s=30).exit_code == 0
        (box.workspace / "ran").unlink(missing_ok=True)
        report = run_state_checks(box, [{"type": "command", "argv": [GIT, *argv], "returncode": None}])
        assert not (box.workspace / "ran").exists(), (box.workspace / "ran").read_text()
        assert report.total == 1
