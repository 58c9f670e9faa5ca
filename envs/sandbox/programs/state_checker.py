# Observes a workspace's final state. stdin: {"nonce": str, "checks": [...]}; stdout: nonce + a JSON list,
# one observation per check. Runs isolated (-I -S): the workspace is data here, nothing in it is imported.
#
# It decides nothing: the checks arrive without their expected values (file contents, command output,
# exit codes, archive members) and the caller compares what comes back (envs/core/checks.py). Whatever runs
# in here (a program the repository's config names, a planted binary) can only report a state, which
# it could have made for real. Contents and outputs come back as sha256 digests plus a short excerpt.
import hashlib
import json
import os
import sys


def digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read(1 << 20).decode("utf-8", "replace")


# Config keys that name a program git runs while it reads (diff drivers' textconv and command, clean/smudge/
# process filters, merge drivers): the repository's config may set them under any driver name, so they are
# found by pattern and overridden with an empty value (no program) for the check's own git.
PLANTED = r"^(diff|filter|merge)\..+\.(textconv|command|clean|smudge|process|driver)$"


def git_env(argv):
    """The inherited environment plus an empty override of every driver program the repository configures
    (GIT_CONFIG_COUNT entries outrank the repository's config; diff.external is overridden by the caller)."""
    import subprocess

    opts, i = [], 1  # git's own options before the subcommand (-C DIR, -c K=V, --git-dir=...): same repository
    while i < len(argv) and argv[i].startswith("-"):
        opts += argv[i:i + 2] if argv[i] in ("-C", "-c") else argv[i:i + 1]
        i += 2 if argv[i] in ("-C", "-c") else 1
    found = subprocess.run([argv[0], *opts, "config", "-z", "--name-only", "--get-regexp", PLANTED],
                           capture_output=True, timeout=10).stdout
    env = dict(os.environ)
    n = int(env.get("GIT_CONFIG_COUNT", "0"))
    for key in dict.fromkeys(k for k in found.decode("utf-8", "replace").split("\0") if k):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, ""
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)
    return env


def observe(c):
    kind = c["type"]
    path = c.get("path", "")
    if kind == "file":
        if os.path.islink(path) or not os.path.isfile(path):  # never open a FIFO or a device
            return {"kind": "missing"}
        got = read(path)
        return {"kind": "file", "sha": digest(got), "sha_strip": digest(got.strip())}
    if kind in ("exists", "absent"):
        return {"lexists": os.path.lexists(path), "isfile": os.path.isfile(path), "isdir": os.path.isdir(path)}
    if kind == "tar":
        import tarfile  # imported only when needed: the checker's start-up is part of every episode

        if os.path.islink(path) or not os.path.isfile(path):
            return {"error": "no such archive"}
        try:
            with tarfile.open(path) as tf:
                names = [n.name.rstrip("/").removeprefix("./") for n in tf.getmembers()[:10000]]
        except (OSError, tarfile.TarError) as exc:
            return {"error": f"not a readable archive ({exc.__class__.__name__})"}
        return {"members": names}
    if kind == "command":
        import subprocess

        argv = c["argv"]
        try:  # the caller's clean environment (absolute git, system PATH, config overrides) is inherited
            env = git_env(argv) if argv and os.path.basename(argv[0]) == "git" else None
            p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=10, env=env)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": exc.__class__.__name__}
        out = p.stdout.strip()
        return {"rc": p.returncode, "sha": digest(out), "excerpt": out[:80]}
    return {"error": f"unknown check type {kind!r}"}


def main():
    spec = json.loads(sys.stdin.read())
    results = []
    for c in spec["checks"]:
        try:
            results.append(observe(c))
        # A check that cannot run fails, it never crashes the checker: the agent can leave the workspace in
        # any state (unreadable files, a directory where a file was expected); the specs were validated.
        except (OSError, ValueError, KeyError, TypeError) as exc:
            results.append({"error": f"{exc.__class__.__name__}: {exc}"})
    sys.stdout.write("\n" + spec["nonce"] + json.dumps(results) + "\n")


main()
