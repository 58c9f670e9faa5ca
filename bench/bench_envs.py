"""Environment benchmark: step overhead against a bare subprocess.run of the same command (measured in the
same run, interleaved, so both see the same machine load), and expert episodes/s per environment.

    python bench/bench_envs.py                  # quick
    python bench/bench_envs.py --steps 200 --episodes 30 --json out.json

Target: env step <= 2x the bare subprocess.run. The step runs the full path: parse the tool call, the
sandbox (namespaces, chroot, uid, cgroup, rlimits, no_new_privs, timeout, output cap, the reaping of
whatever the command leaves), the quota (a tmpfs as root, else a polled directory).
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import statistics
import subprocess
import time

import envs
from envs.sandbox.sandbox import isolation_mode
from transcript.toolcalls import format_tool_call

COMMANDS = ["true", "wc -l < notes.txt", "tar czf a.tar.gz d && tar tzf a.tar.gz", "python3 -c 'print(sum(range(99)))'"]


def step_overhead(command: str, n: int) -> dict:
    env = envs.make("bash_exec_env", max_steps=10 ** 9)
    try:
        env.reset(options={"index": 0})
        box = env.unwrapped.box
        box.write_files({"notes.txt": "a\nb\nc\n", "d/x.txt": "x\n"})
        action = format_tool_call("run", {"command": command})
        bare_env = dict(box.env, HOME=str(box.workspace))
        env_s, bare_s = [], []
        for _ in range(n):
            t = time.perf_counter()
            env.step(action)
            env_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["/bin/bash", "-c", command], cwd=box.workspace, env=bare_env, capture_output=True)
            bare_s.append(time.perf_counter() - t)
    finally:
        env.close()
    e, b = statistics.median(env_s), statistics.median(bare_s)
    return {"command": command, "env_step_ms": round(e * 1e3, 2), "bare_ms": round(b * 1e3, 2),
            "ratio": round(e / b, 2)}


def big_caller_step(n: int, megabytes: int = 400) -> dict:
    """A step from a caller holding a lot of memory (a trainer with a model): spawn helper vs forking here."""
    import os

    from envs.sandbox.sandbox import Sandbox

    ballast = b"\x01" * (megabytes << 20)  # touched pages: what makes a fork of the caller expensive
    out = {"caller_mb": megabytes}
    before = os.environ.get("LACHESIS_SANDBOX_SPAWNER")
    try:
        for label, flag in (("spawn_helper_ms", "1"), ("fork_here_ms", "0")):
            os.environ["LACHESIS_SANDBOX_SPAWNER"] = flag
            with Sandbox() as box:
                box.write_files({"notes.txt": "a\nb\n"})
                box.run("true")
                ts = []
                for _ in range(n):
                    t = time.perf_counter()
                    box.run("wc -l < notes.txt")
                    ts.append(time.perf_counter() - t)
            out[label] = round(statistics.median(ts) * 1e3, 2)
    finally:
        if before is None:
            os.environ.pop("LACHESIS_SANDBOX_SPAWNER", None)
        else:
            os.environ["LACHESIS_SANDBOX_SPAWNER"] = before
    del ballast
    return out


def episodes_per_s(name: str, n: int) -> dict:
    env = envs.make(name, split="test")
    policy = envs.get_policy(name, "expert", seed=0)
    rewards = []
    t0 = time.perf_counter()
    try:
        for i in range(n):
            rewards.append(envs.play(env, policy, options={"index": i}).reward)
    finally:
        env.close()
    wall = time.perf_counter() - t0
    return {"env": name, "episodes": n, "episodes_per_s": round(n / wall, 2), "mean_reward": sum(rewards) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--episodes", type=int, default=22)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    results = {"isolation": isolation_mode(), "steps": [step_overhead(c, args.steps) for c in COMMANDS],
               "episodes": [episodes_per_s(n, args.episodes) for n in ("bash_exec_env", "git_repo_env",
                                                                        "python_debug_env")],
               "big_caller": big_caller_step(max(10, args.steps // 4))}
    print(f"sandbox isolation: {results['isolation']}")
    for s in results["steps"]:
        print(f"  step {s['command']!r:<46} env {s['env_step_ms']:7.2f} ms  bare {s['bare_ms']:7.2f} ms  "
              f"ratio {s['ratio']:.2f}x (target <= 2x)")
    for e in results["episodes"]:
        print(f"  {e['env']:<17} {e['episodes_per_s']:6.2f} expert episodes/s  (mean reward {e['mean_reward']:.2f})")
    b = results["big_caller"]
    print(f"  step from a {b['caller_mb']} MB caller: spawn helper {b['spawn_helper_ms']:.2f} ms, "
          f"forking the caller {b['fork_here_ms']:.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.json_out:
        bench_json.write(args.json_out, "envs", results)


if __name__ == "__main__":
    main()
