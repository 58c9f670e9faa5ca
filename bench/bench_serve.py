"""lake serve-model: 32 concurrent agents against plain one-prompt-at-a-time generation, and how soon a new
increment of the streaming trainer answers requests, in the same run.

- concurrency: --clients (32) hermes_eval-style requests (an environment's system prompt, its tools and one held-out
  task, greedy, --max-tokens new tokens) sent at once to a real `lake serve-model` process (one torch thread, calls
  recorded in its lake as a user gets it) through HTTP, against plain transformers `model.generate` of the same
  rendered prompts one at a time in this process (one torch thread, greedy, the same max_new_tokens). Target
  (issue 25): >= 2x.
- swap: `lake serve-model --follow` a real `lake train watch` process; a client asks in a loop (2 new tokens per
  request) while rows are appended to the lake; per increment, the time from the increment written (the newest
  file in its checkpoint folder, written just before the folder is renamed into place) to the first response
  that names the new version. Target (issue 25): < 2 s.
The 1-minute load is printed with the figures and recorded in --json-out.

usage: python bench/bench_serve.py [--model tiny] [--clients 32] [--max-tokens 32] [--increments 3] [--json-out PATH]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_watch import batch, lake_argv, read_event  # noqa: E402  (one way to start and feed the streaming trainer)
from ingest_helpers import free_port  # noqa: E402


def requests_of(n: int, env: str = "bash_exec_env") -> list[dict]:
    """n hermes_eval-style chats: the environment's first observation of n held-out tasks, with its tools."""
    import envs
    from trainers.modeling.chat import normalize_tools

    out = []
    for i, task in enumerate(envs.load_tasks(env, "test")[:n]):
        e = envs.make(env)
        obs, info = e.reset(seed=i, options={"task_id": task.task_id})
        out.append({"messages": envs.EpisodeRecorder(obs, info).messages, "tools": normalize_tools(info["tools"])})
        e.close()
    return out


class ModelServer:
    """`lake serve-model` as a user starts it, on a free loopback port; waits for /v1/health."""

    def __init__(self, *args: str, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(lake_argv("serve-model", "--port", str(self.port), "--threads", "1", *args),
                                     stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lake serve-model exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError("lake serve-model did not start")
        self.label = httpx.get(self.url + "/v1/models").json()["data"][0]["root"]  # the bare name: the newest version

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def chat(server: ModelServer, req: dict, max_tokens: int, client: httpx.Client | None = None) -> dict:
    body = {"model": server.label, "messages": req["messages"], "tools": req["tools"], "max_tokens": max_tokens,
            "temperature": 0}
    r = (client or httpx).post(server.url + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()


def concurrency(a, work: Path, reqs: list[dict]) -> dict:
    """All requests at once to the server vs one at a time through model.generate."""
    import torch

    from trainers.modeling.chat import prompt_ids
    from trainers.modeling.models import load_model, load_tokenizer, resolve_model

    server = ModelServer("--model", a.model, "--lake", str(work / "lake-concurrency"), "--max-batch",
                         str(a.clients), "--batch-window-ms", "50", log=work / "serve-concurrency.log")
    try:
        chat(server, reqs[0], 2)  # warm-up: the first forward pays one-off costs
        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.clients) as pool:
            answers = list(pool.map(lambda r: chat(server, r, a.max_tokens), reqs))
        served_s = time.perf_counter() - t0
        health = httpx.get(server.url + "/v1/health").json()
    finally:
        server.stop()
    torch.set_num_threads(1)
    path = resolve_model(a.model)
    tok = load_tokenizer(path)
    model = load_model(path, device=torch.device("cpu")).eval()
    prompts = [prompt_ids(tok, r["messages"], r["tools"]) for r in reqs]
    with torch.no_grad():
        model.generate(torch.tensor([prompts[0]]), max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id)
        t0 = time.perf_counter()
        plain_tokens = 0
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=a.max_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
            plain_tokens += out.shape[1] - len(p)
        plain_s = time.perf_counter() - t0
    served_tokens = sum(x["usage"]["completion_tokens"] for x in answers)
    return {"clients": a.clients, "max_tokens": a.max_tokens, "prompt_tokens_mean": round(statistics.mean(map(len, prompts)), 1),
            "served_s": round(served_s, 3), "plain_s": round(plain_s, 3), "served_tokens": served_tokens,
            "plain_tokens": int(plain_tokens), "ratio": round(plain_s / served_s, 3),
            "server_batches": health["batches"], "recorded": health["recorded"], "load_avg_1m": round(os.getloadavg()[0], 2)}


def swap(a, work: Path, req: dict) -> dict:
    """Increments of a real streaming trainer, served by --follow: increment written -> first response by it."""
    from lake import Lake

    lake = Lake.init(work / "lake-swap")
    folder = work / "watch"
    trainer = subprocess.Popen(lake_argv("train", "watch", "--lake", str(lake.root), "--output", str(folder), "--json",
                                         "--model", a.model, "--split", "all", "--max-steps", "2", "--batch-size", "8",
                                         "--threads", "1", "--replay", "0"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    read_event(trainer, "ready")
    server = ModelServer("--model", a.model, "--follow", str(folder), "--lake", str(work / "lake-swap-calls"),
                         "--poll-interval", "0.1", log=work / "serve-swap.log")
    seen: list[tuple[float, str]] = []  # (response time, version) of every answer
    stop = threading.Event()

    def ask() -> None:
        with httpx.Client() as c:
            while not stop.is_set():
                seen.append((time.time(), chat(server, req, 2, c)["model"]))

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    delays, failed = [], 0
    try:
        for i in range(a.increments):
            lake.append("trajectories", batch(i, 8))
            ev = read_event(trainer, "increment")
            ckpt = Path(ev["adapter"]).parent
            written = max(p.stat().st_mtime for p in ckpt.rglob("*") if p.is_file())
            want = f"{a.model}@{ev['increment']}"
            deadline = time.time() + 120
            while time.time() < deadline and not any(v == want for _, v in seen):
                time.sleep(0.02)
            first = min((t for t, v in seen if v == want), default=None)
            if first is None:
                raise RuntimeError(f"no response by {want} within 120 s: {(work / 'serve-swap.log').read_text()[-2000:]}")
            delays.append(first - written)
            print(f"increment {ev['increment']}: written -> first response by {want} {delays[-1]:.2f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        stop.set()
        asker.join(60)
        health = httpx.get(server.url + "/v1/health").json()
        server.stop()
        trainer.terminate()
        trainer.wait(60)
    failed = health["failed"]
    served = [e for e in health["follow"] or [] if e["event"] == "served"]  # the follower's own split of each swap
    return {"increments": a.increments, "written_to_first_response_s": [round(d, 3) for d in delays],
            "load_s": [e.get("load_s") for e in served],
            "written_to_served_s": [e.get("written_to_served_s") for e in served],
            "median_s": round(statistics.median(delays), 3), "max_s": round(max(delays), 3),
            "requests": len(seen), "failed_requests": failed, "load_avg_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a folder")
    ap.add_argument("--clients", type=int, default=32, help="concurrent requests")
    ap.add_argument("--max-tokens", type=int, default=32, help="new tokens per request")
    ap.add_argument("--increments", type=int, default=3, help="streaming-trainer increments for the swap figure")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    reqs = requests_of(a.clients)
    conc = concurrency(a, work, reqs)
    print(f"{a.clients} concurrent requests: served {conc['served_s']:.2f} s vs plain generate one at a time "
          f"{conc['plain_s']:.2f} s = {conc['ratio']:.2f}x (target >= 2x; load {conc['load_avg_1m']})", flush=True)
    sw = swap(a, work, reqs[0])
    print(f"increment written -> first response by it: median {sw['median_s']:.2f} s, max {sw['max_s']:.2f} s "
          f"(target < 2 s; loading the version {sw['load_s']} s, written -> served {sw['written_to_served_s']} s); "
          f"{sw['requests']} requests, {sw['failed_requests']} failed", flush=True)
    where = f"{a.model}, {a.clients} hermes_eval-style chats (~{conc['prompt_tokens_mean']:.0f} prompt tokens), " \
            f"{a.max_tokens} new tokens, greedy, 1 torch thread"
    results = {"model": a.model, "concurrency": conc, "swap": sw, "comparisons": [
        {"workload": f"lake serve-model, {a.clients} concurrent requests ({where})",
         "baseline": "plain transformers generate, one prompt at a time", "baseline_figure": f"{conc['plain_s']:.2f} s",
         "figure": f"{conc['served_s']:.2f} s", "ratio": conc["ratio"], "better": "higher", "target": ">= 2x"},
        {"workload": f"lake serve-model --follow: increment written -> first response by it ({a.model}, median of "
                     f"{sw['increments']}; {sw['failed_requests']} of {sw['requests']} requests failed)",
         "baseline": "the 2 s target", "baseline_figure": "2.00 s", "figure": f"{sw['median_s']:.2f} s",
         "ratio": round(sw["median_s"] / 2.0, 3), "better": "lower", "target": "< 1x"},
    ]}
    print(json.dumps(results, indent=1))
    if a.json_out:
        bench_json.write(a.json_out, "bench_serve", results)


if __name__ == "__main__":
    main()
