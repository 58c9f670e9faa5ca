# Checks a workspace's final state. stdin: {"nonce": str, "checks": [...]}; stdout: nonce + JSON list.
# Runs isolated (-I -S): the workspace is data here, nothing in it is imported.
import json
import os
import sys

GIT_SAFE = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*"]


def _safe_git_env():
    # Agent-written .git/config must not run code (fsmonitor, hooks) or hide state from the checks.
    env = dict(os.environ)
    n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    for key, value in (("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"), ("safe.directory", "*")):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)
    return env


SAFE_ENV = _safe_git_env()


def read(path):
    with open(path, "rb") as f:
        return f.read(1 << 20).decode("utf-8", "replace")


def check(c):
    kind = c["type"]
    path = c.get("path", "")
    if kind == "file":
        if os.path.islink(path) or not os.path.isfile(path):
            return False, f"{path}: no such file"
        got = read(path)
        if got == c["content"] or (c.get("strip") and got.strip() == c["content"].strip()):
            return True, f"{path}: content ok"
        return False, f"{path}: content differs"
    if kind == "exists":
        want = c.get("kind", "any")
        ok = os.path.lexists(path) and (want == "any" or (want == "file" and os.path.isfile(path))
                                        or (want == "dir" and os.path.isdir(path)))
        return ok, f"{path}: {'exists' if ok else 'missing'}"
    if kind == "absent":
        ok = not os.path.lexists(path)
        return ok, f"{path}: {'absent' if ok else 'still exists'}"
    if kind == "tar":
        import tarfile  # imported only when needed: the checker's start-up is part of every episode

        if os.path.islink(path) or not os.path.isfile(path):  # a FIFO here would block the checker
            return False, f"{path}: no such archive"
        try:
            with tarfile.open(path) as tf:
                names = {n.name.rstrip("/").removeprefix("./") for n in tf.getmembers()}
        except (OSError, tarfile.TarError) as exc:
            return False, f"{path}: not a readable archive ({exc.__class__.__name__})"
        missing = [m for m in c["members"] if m not in names]
        return not missing, f"{path}: missing {missing}" if missing else f"{path}: members ok"
    if kind == "command":
        import subprocess

        argv = list(c["argv"])
        if argv and argv[0] == "git":
            argv = ["git"] + GIT_SAFE + argv[1:]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10, env=SAFE_ENV)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{' '.join(c['argv'])}: {exc.__class__.__name__}"
        got = p.stdout.strip()
        want = c.get("stdout")
        if "returncode" in c and p.returncode != c["returncode"]:
            return False, f"{' '.join(c['argv'])}: exit {p.returncode}"
        if want is not None and got != want.strip():
            return False, f"{' '.join(c['argv'])}: got {got[:80]!r}"
        return True, f"{' '.join(c['argv'])}: ok"
    return False, f"unknown check type {kind!r}"


def main():
    spec = json.loads(sys.stdin.read())
    results = []
    for c in spec["checks"]:
        try:
            ok, detail = check(c)
        # A check that cannot run fails, it never crashes the scorer: the agent can leave the workspace in
        # any state (unreadable files, a directory where a file was expected); the specs were validated.
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ok, detail = False, f"{c.get('type')}: {exc.__class__.__name__}: {exc}"
        results.append({"type": c.get("type"), "ok": bool(ok), "detail": detail})
    sys.stdout.write("\n" + spec["nonce"] + json.dumps(results) + "\n")


main()
