# Runs Python tests against the workspace's modules. stdin: {"nonce", "suites": [{"name", "source"}],
# "per_test_s", "workspace", "discover"}; stdout: nonce-prefixed JSON frames. Tests are plain asserts (the
# module body is one test) or pytest style (every top-level test_* function is one test).
#
# This process imports the agent's code, so nothing it reports is trusted for a reward: hidden tests
# arrive split (envs/core/probes.py), with every assert replaced by __lachesis_probe__(k, value) calls that
# send the value's repr back, and the caller compares them with expected values this process never sees.
# Frames: {"t": test, "p": k, "r": repr} per probe, {"t": test, "end": ok, "d": detail} per test (the
# module body as the file's name). Visible tests (discover) run unsplit: their result is feedback only.
import json
import signal
import sys
import traceback
import types

spec = json.loads(sys.stdin.read())
NONCE = spec.pop("nonce")
sys.path.insert(0, spec.get("workspace", "/workspace"))
PER_TEST = int(spec.get("per_test_s", 3))
MAX_REPR = 1 << 16
emit = sys.stdout.write
flush = sys.stdout.flush
current = [""]


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


signal.signal(signal.SIGALRM, _alarm)


def frame(obj):
    emit("\n" + NONCE + json.dumps(obj) + "\n")
    flush()


def probe(k, value):
    text = repr(value)
    frame({"t": current[0], "p": k, "r": text if len(text) <= MAX_REPR else None})


def describe(exc):
    if isinstance(exc, _Timeout):
        return "timed out"
    if isinstance(exc, AssertionError):
        tb = traceback.extract_tb(exc.__traceback__)
        where = tb[-1].line if tb else ""
        return f"AssertionError: {exc}" if str(exc) else f"AssertionError: {where}"
    return f"{type(exc).__name__}: {exc}"


def run(test, fn):
    current[0] = test
    signal.alarm(PER_TEST)
    try:
        fn()
        ok, detail = True, ""
    except BaseException as exc:
        ok, detail = False, describe(exc)
    finally:
        signal.alarm(0)
    frame({"t": test, "end": ok, "d": detail[-400:]})
    return ok


def run_suite(name, source):
    module = types.ModuleType(name.removesuffix(".py"))
    module.__file__ = name
    module.__dict__["__lachesis_probe__"] = probe
    body_ok = run(name, lambda: exec(compile(source, name, "exec"), module.__dict__))
    if not body_ok:
        return
    for key, fn in list(module.__dict__.items()):
        if key.startswith("test") and isinstance(fn, types.FunctionType) and fn.__code__.co_filename == name:
            run(f"{name}::{key}", fn)


if spec.get("discover"):
    # Visible tests: every test_*.py at the top of the workspace, as the agent left them.
    import os

    root = spec.get("workspace", "/workspace")
    for fname in sorted(os.listdir(root)):
        if fname.startswith("test_") and fname.endswith(".py") and os.path.isfile(os.path.join(root, fname)):
            with open(os.path.join(root, fname), encoding="utf-8", errors="replace") as f:
                spec["suites"].append({"name": fname, "source": f.read()})
    frame({"suites": [s["name"] for s in spec["suites"]]})
for suite in spec["suites"]:
    run_suite(suite["name"], suite["source"])
