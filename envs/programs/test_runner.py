# Runs Python tests against the workspace's modules. stdin: {"nonce", "suites": [{"name", "source"}],
# "per_test_s"}; stdout: one nonce-prefixed JSON line per test. Tests are plain asserts (the module body
# is one test) or pytest style (every top-level test_* function is one test). The nonce is read before
# any workspace code runs, so an early exit or printed fake results cannot count as passes.
import json
import signal
import sys
import traceback
import types

spec = json.loads(sys.stdin.read())
NONCE = spec.pop("nonce")
sys.path.insert(0, spec.get("workspace", "/workspace"))
PER_TEST = int(spec.get("per_test_s", 3))
emit = sys.stdout.write
flush = sys.stdout.flush


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


signal.signal(signal.SIGALRM, _alarm)


def report(name, ok, detail=""):
    emit("\n" + NONCE + json.dumps({"test": name, "ok": ok, "detail": detail[-400:]}) + "\n")
    flush()


def describe(exc):
    if isinstance(exc, _Timeout):
        return "timed out"
    if isinstance(exc, AssertionError):
        tb = traceback.extract_tb(exc.__traceback__)
        where = tb[-1].line if tb else ""
        return f"AssertionError: {exc}" if str(exc) else f"AssertionError: {where}"
    return f"{type(exc).__name__}: {exc}"


def run_suite(name, source):
    module = types.ModuleType(name.removesuffix(".py"))
    module.__file__ = name
    signal.alarm(PER_TEST)
    try:
        exec(compile(source, name, "exec"), module.__dict__)
        body_error = None
    except BaseException as exc:
        body_error = exc
    finally:
        signal.alarm(0)
    tests = [(k, v) for k, v in module.__dict__.items() if k.startswith("test") and isinstance(v, types.FunctionType)
             and v.__code__.co_filename == name]
    if not tests or body_error is not None:
        # Plain-assert files are one test; a pytest file whose body fails fails every test in it.
        names = [f"{name}::{k}" for k, _ in tests] or [name]
        for n in names:
            report(n, body_error is None, "" if body_error is None else describe(body_error))
        return
    for key, fn in tests:
        signal.alarm(PER_TEST)
        try:
            fn()
            ok, detail = True, ""
        except BaseException as exc:
            ok, detail = False, describe(exc)
        finally:
            signal.alarm(0)
        report(f"{name}::{key}", ok, detail)


if spec.get("discover"):
    # Visible tests: every test_*.py at the top of the workspace, as the agent left them.
    import os

    root = spec.get("workspace", "/workspace")
    for fname in sorted(os.listdir(root)):
        if fname.startswith("test_") and fname.endswith(".py") and os.path.isfile(os.path.join(root, fname)):
            with open(os.path.join(root, fname), encoding="utf-8", errors="replace") as f:
                spec["suites"].append({"name": fname, "source": f.read()})
    emit("\n" + NONCE + json.dumps({"suites": [s["name"] for s in spec["suites"]]}) + "\n")
for suite in spec["suites"]:
    run_suite(suite["name"], suite["source"])
emit("\n" + NONCE + json.dumps({"done": True}) + "\n")
