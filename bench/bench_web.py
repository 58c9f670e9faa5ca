"""web_form_env benchmark: expert episodes/s per browser and with N browsers at once, reset and step latency against
MiniWoB++'s own gymnasium environment (measured in the same run, on the same Chromium and driver), and the
browser's resident memory.

    python bench/bench_web.py                          # quick
    python bench/bench_web.py --episodes 100 --browsers 2 --json-out bench/results/web.json

Target (issue 39): >= 3 expert episodes/s per browser on 2 cores, so an episode's cost is the model's, not the
browser's. Episodes cycle through the test split's tasks (every train family), from a browser already started
(the start is reported apart). N browsers: N threads, each with its own environment, in one pool of N browsers.
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import statistics
import threading
import time

import envs
from envs.web import browser as browsers
from envs.web.experts import parse_elements
from transcript.toolcalls import format_tool_call

LATENCY_TASK = "click-test-2"  # one click ends it: a reset and a step of the same size in both environments


def expert_rate(env, policy, episodes: int, offset: int = 0) -> dict:
    wins = 0
    t0 = time.perf_counter()
    for i in range(episodes):
        wins += envs.play(env, policy, seed=i, options={"split": "test", "index": (offset + i) % 250}).success
    wall = time.perf_counter() - t0
    return {"episodes": episodes, "wall_s": round(wall, 2), "episodes_per_s": round(episodes / wall, 2),
            "success": round(wins / episodes, 3)}


def one_browser(episodes: int) -> dict:
    pool = browsers.BrowserPool(max_browsers=1)
    env = envs.make("web_form_env", split="test", pool=pool)
    try:
        t0 = time.perf_counter()
        env.reset(options={"index": 0})
        start_s = time.perf_counter() - t0
        out = expert_rate(env, envs.get_policy("web_form_env", "expert"), episodes)
        out["first_reset_s"] = round(start_s, 2)
        out["memory"] = env.unwrapped.browser_memory()
        return out
    finally:
        env.close()
        pool.shutdown()


def n_browsers(n: int, episodes: int) -> dict:
    """n threads, each its own environment, in a pool of n browsers (each thread's tab lands in its own browser)."""
    pool = browsers.BrowserPool(max_browsers=n)
    envs_ = [envs.make("web_form_env", split="test", pool=pool) for _ in range(n)]
    results: list[dict] = [{} for _ in range(n)]
    try:
        for e in envs_:  # start every browser before the clock starts, as one_browser does
            e.reset(options={"index": 0})

        def work(k: int) -> None:
            results[k] = expert_rate(envs_[k], envs.get_policy("web_form_env", "expert"), episodes, offset=k * 7)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        memory = [b.memory() for b in pool.browsers]
        return {"browsers": len(pool.browsers), "episodes": n * episodes, "wall_s": round(wall, 2),
                "episodes_per_s": round(n * episodes / wall, 2),
                "success": round(sum(r["success"] for r in results) / n, 3), "memory": memory}
    finally:
        for e in envs_:
            e.close()
        pool.shutdown()


def ours_latency(n: int) -> dict:
    pool = browsers.BrowserPool(max_browsers=1)
    env = envs.make("web_form_env", split="train", templates=[LATENCY_TASK], pool=pool)
    resets, steps = [], []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            obs, info = env.reset(seed=i, options={"index": i})
            resets.append(time.perf_counter() - t0)
            target = next(e for e in parse_elements(obs) if e.text == info["fields"]["target"])
            t0 = time.perf_counter()
            env.step(format_tool_call("click", {"ref": target.ref}))
            steps.append(time.perf_counter() - t0)
    finally:
        env.close()
        pool.shutdown()
    return {"reset_ms": round(statistics.median(resets) * 1e3, 2), "step_ms": round(statistics.median(steps) * 1e3, 2)}


def miniwob_latency(n: int) -> dict:
    """MiniWoB++'s own gymnasium environment on the same task, Chromium and driver (its defaults otherwise: a DOM
    observation and a screenshot per reset and step)."""
    import gymnasium
    import miniwob  # noqa: F401  (registers the miniwob/ environments)
    from miniwob.action import ActionTypes

    os.environ["MINIWOB_CHROME_BINARY"] = browsers.chromium_path()
    os.environ["MINIWOB_CHROMEDRIVER"] = browsers.driver_path()
    env = gymnasium.make(f"miniwob/{LATENCY_TASK}-v1")
    resets, steps = [], []
    try:
        env.reset(seed=0)
        for i in range(n):
            t0 = time.perf_counter()
            obs, info = env.reset(seed=i)
            resets.append(time.perf_counter() - t0)
            target = dict(obs["fields"])["target"]
            ref = next(e["ref"] for e in obs["dom_elements"] if e["text"] == target)
            action = env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=ref)
            t0 = time.perf_counter()
            env.step(action)
            steps.append(time.perf_counter() - t0)
    finally:
        env.close()
    return {"reset_ms": round(statistics.median(resets) * 1e3, 2), "step_ms": round(statistics.median(steps) * 1e3, 2)}


def bare_browser_memory() -> dict:
    """The same Chromium with one blank tab: what a browser costs before any MiniWoB page."""
    b = browsers.Browser().start()
    try:
        time.sleep(0.5)
        return b.memory()
    finally:
        b.close()


def comparisons(r: dict) -> list[dict]:
    one, many, lat = r["one_browser"], r["n_browsers"], r["latency"]
    rows = [
        {"workload": f"expert episodes/s, 1 browser ({one['episodes']} test-split episodes, success {one['success']:.2f})",
         "baseline": "the 3 episodes/s target", "baseline_figure": "3.00/s", "figure": f"{one['episodes_per_s']:.2f}/s",
         "ratio": round(one["episodes_per_s"] / 3.0, 2), "better": "higher", "target": ">= 1x"},
        {"workload": f"expert episodes/s, {many['browsers']} browsers in parallel (threads; success {many['success']:.2f})",
         "baseline": "1 browser, same run", "baseline_figure": f"{one['episodes_per_s']:.2f}/s",
         "figure": f"{many['episodes_per_s']:.2f}/s", "ratio": round(many["episodes_per_s"] / one["episodes_per_s"], 2),
         "better": "higher"},
        {"workload": f"browser memory (PSS, {one['memory'].get('processes', 0)} processes) after the 1-browser run",
         "baseline": "the same Chromium with a blank tab", "baseline_figure": f"{r['bare_memory']['pss_mb']:.0f} MB",
         "figure": f"{one['memory'].get('pss_mb', 0):.0f} MB",
         "ratio": round(one["memory"].get("pss_mb", 0) / max(1.0, r["bare_memory"]["pss_mb"]), 2), "better": "lower"},
    ]
    if "miniwob" in lat:
        for key, what in (("reset_ms", "reset"), ("step_ms", "step (one click)")):
            rows.append({"workload": f"{what} latency p50, {LATENCY_TASK}, with the text observation",
                         "baseline": "MiniWoB++'s own gymnasium env (DOM + screenshot)",
                         "baseline_figure": f"{lat['miniwob'][key]:.1f} ms", "figure": f"{lat['ours'][key]:.1f} ms",
                         "ratio": round(lat["ours"][key] / lat["miniwob"][key], 2), "better": "lower"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50, help="expert episodes per browser")
    ap.add_argument("--browsers", type=int, default=2, help="browsers in the parallel run")
    ap.add_argument("--latency", type=int, default=30, help="resets and steps timed per environment")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    reason = browsers.missing()
    if reason:
        raise SystemExit(reason)
    r: dict = {"bare_memory": bare_browser_memory(), "one_browser": one_browser(args.episodes),
               "n_browsers": n_browsers(args.browsers, args.episodes),
               "latency": {"ours": ours_latency(args.latency)}}
    try:
        r["latency"]["miniwob"] = miniwob_latency(args.latency)
    except Exception as exc:  # the baseline is optional: say why it is missing
        r["latency"]["miniwob_error"] = str(exc).splitlines()[0][:200]
    r["comparisons"] = comparisons(r)
    one = r["one_browser"]
    print(f"1 browser: {one['episodes_per_s']:.2f} expert episodes/s (target >= 3), success {one['success']:.2f}, "
          f"first reset (browser start) {one['first_reset_s']:.2f} s, memory {one['memory']}")
    many = r["n_browsers"]
    print(f"{many['browsers']} browsers: {many['episodes_per_s']:.2f} episodes/s "
          f"({many['episodes_per_s'] / one['episodes_per_s']:.2f}x), memory {many['memory']}")
    print(f"latency p50: ours {r['latency']['ours']}, MiniWoB's env {r['latency'].get('miniwob', r['latency'].get('miniwob_error'))}")
    print(f"bare Chromium memory: {r['bare_memory']}")
    print(json.dumps(r["comparisons"], indent=1))
    if args.json_out:
        bench_json.write(args.json_out, "web", r)
    left = browsers.leftovers()
    if left:
        raise SystemExit(f"browser processes left: {left}")


if __name__ == "__main__":
    main()
