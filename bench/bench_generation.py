"""The one generation path's savings (issue 24): hermes_eval and an online-RL step, new path against the plain one,
in the same run, in CPU-seconds (this process and its sandboxed commands: the machine is shared, so wall time says
little).

- plain (the path before trainers/generation/generate.py): transformers' `model.generate` over the whole conversation at
  every turn (generation.reference_generate), float32, the LoRA adapter unmerged; the GRPO update on whole
  sequences in float32, no importance weights.
- levers: the exact savings alone (the prompts' shared system/tools prefix once, each episode's KV cache kept across
  its turns; the update's shared prefix), float32: greedy episodes compared with the plain ones.
- new: the levers plus bf16 where supported (generation.bf16_supported): rollouts and evaluation from a merged bf16
  copy, the update under bf16 autocast with truncated importance sampling; its log-prob drift is reported (mean
  |logp_train - logp_rollout| per sampled token, the update's own figure).

Workload: bash_exec_env, the first --tasks test tasks greedily (hermes_eval: batch 64, --turns turns, --tokens per
turn), and --steps online steps of --batch tasks x --group rollouts sampled at temperature 1 from the train split,
each followed by one update at micro-batch --micro. An untrained policy rarely calls a tool, so its episodes would
end at turn 1 and its groups have equal returns (no update at all): with --force-call (default) a tool call is
appended to every turn-1 reply on all paths alike, so episodes go on to turn 2 as an SFT policy's do, and the
update's advantages are set to +1/-1 alternately so every rollout is trained.

usage: python bench/bench_generation.py [--model tiny|smollm2] [--init RUN] [--tasks 100] [--steps 2] [--quick]
                                        [--json] [--json-out PATH]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV = "bash_exec_env"
PATHS = ("plain", "levers", "new")


def cpu_s() -> float:
    """CPU-seconds of this process and its finished children (the environments' sandboxed commands)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


class Bench:
    def __init__(self, args):
        import torch

        from trainers.runtime.device import device
        from trainers.generation.generate import bf16_supported
        from trainers.modeling.policy import build_policy, resolve_spec, tokenizer_for

        self.args = args
        self.dev = device("cpu")
        self.bf16 = bf16_supported(self.dev)
        self.spec = resolve_spec(args.model, args.init, 16, 32)
        self.tok = tokenizer_for(self.spec)
        self.build = lambda: build_policy(self.spec, None, self.dev)[0]
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        import envs

        self.call = self.tok.encode(envs.format_tool_call("run", {"command": "ls"}), add_special_tokens=False)
        self.torch = torch

    # ------------------------------------------------------------------------------------- generation callables
    def generator(self, path: str, model, temperature: float):
        """(play's generate(prompts, episodes), forget) of a path."""
        from trainers.generation.generate import Generation, Sampling, Turns, reference_generate

        n = self.args.tokens
        if path == "plain":
            def gen(prompts, _eps):
                return [Generation.scripted(x) for x in reference_generate(model, self.tok, prompts, n, temperature)]
            forget = None
        else:
            turns = Turns(model, self.tok, Sampling(max_new_tokens=n, temperature=temperature))
            gen, forget = turns, turns.forget
        if not self.args.force_call:
            return gen, forget

        def with_a_call(prompts, episodes):
            out = []
            for g, e in zip(gen(prompts, episodes), episodes):
                if e.turns == 0:
                    reply = g.token_ids[:-1] if g.token_ids[-1] == self.eos else g.token_ids
                    g = Generation(reply + self.call + [self.eos],
                                   g.logprobs[: len(reply)] + [float("nan")] * (len(self.call) + 1))
                out.append(g)
            return out

        return with_a_call, forget

    def gen_model(self, path: str, policy):
        from trainers.generation.generate import rollout_model

        return rollout_model(policy, path == "new" and self.bf16)

    # ------------------------------------------------------------------------------------- hermes_eval
    def hermes_eval(self, path: str, policy) -> dict:
        import envs

        from trainers.eval.config import EvalSettings
        from trainers.generation.episodes import Episode, play

        a = self.args
        s = EvalSettings(task=ENV, max_new_tokens=a.tokens, max_turns=a.turns, batch_size=64, record_in_lake=False,
                         progress=False)
        tasks = envs.load_tasks(ENV, "test")[: a.tasks]
        c0 = cpu_s()
        model = self.gen_model(path, policy)
        gen, forget = self.generator(path, model, 0.0)
        eps = [Episode(envs.make(ENV, max_steps=a.turns, split="test"), t.task_id, s.seed + i, self.tok)
               for i, t in enumerate(tasks)]
        try:
            gen_s = play(eps, gen, self.tok, s.batch_size, s.max_context, forget=forget)
        finally:
            for e in eps:
                e.env.close()
        cpu = cpu_s() - c0
        return {"cpu_s": round(cpu, 2), "generate_wall_s": round(gen_s, 2), "episodes": len(eps),
                "turns": sum(e.turns for e in eps), "success_rate": sum(e.recorder.success for e in eps) / len(eps),
                "_ids": [e.ids for e in eps], "_results": [e.result() for e in eps]}

    # ------------------------------------------------------------------------------------- online RL step
    def online(self, path: str) -> dict:
        from trainers.eval.evaluate import load_eval_tasks
        from trainers.rl.grpo import policy_update
        from trainers.rl.groups import TaskStream, play_groups
        from trainers.rl.project_config import ProjectConfig
        from trainers.rl.config import OnlineConfig

        a, torch = self.args, self.torch
        hp = replace(ProjectConfig(), batch_size=a.batch, group_size=a.group, max_turns=a.turns,
                     max_completion_length=a.tokens, temperature=1.0, learning_rate=1e-5,
                     stop_repetition=0)  # the plain path has no loop stop: the same tokens on both sides
        cfg = OnlineConfig(env=ENV, steps=a.steps, progress=False, plot=False)
        stream = TaskStream(load_eval_tasks(ENV, "train", None), hp.seed)
        torch.manual_seed(0)
        policy = self.build()
        params = [p for p in policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=hp.learning_rate)
        steps, drift, weight = [], [], []
        for step in range(1, a.steps + 1):
            torch.manual_seed(step)
            c0 = cpu_s()
            model = self.gen_model(path, policy)
            gen, _ = self.generator(path, model, hp.temperature)
            res = play_groups(model, self.tok, cfg, hp, stream, (step - 1) * hp.batch_size, step, generate=gen)
            c1 = cpu_s()
            for i, e in enumerate(res.rollouts):
                e.advantage = 1.0 if i % 2 == 0 else -1.0
            stats, _ = policy_update(policy, params, opt, res.rollouts, self.tok.pad_token_id, a.micro,
                                     bf16=path == "new" and self.bf16, share_prefix=path != "plain",
                                     tis_cap=0.0 if path == "plain" else 2.0)
            c2 = cpu_s()
            steps.append({"rollout_cpu_s": round(c1 - c0, 2), "update_cpu_s": round(c2 - c1, 2),
                          "sampled_tokens": stats.sampled_tokens, "tokens": stats.tokens,
                          "turns": sum(e.turns for e in res.rollouts), "shared_tokens": stats.shared_tokens})
            drift.append(stats.logprob_drift)
            weight.append(stats.tis_weight)
        roll = sum(s["rollout_cpu_s"] for s in steps)
        upd = sum(s["update_cpu_s"] for s in steps)
        return {"steps": steps, "rollout_cpu_s": round(roll, 2), "update_cpu_s": round(upd, 2),
                "cpu_s_per_step": round((roll + upd) / len(steps), 2),
                "sampled_tokens": sum(s["sampled_tokens"] for s in steps),
                "logprob_drift": round(sum(drift) / len(drift), 5), "tis_weight": round(sum(weight) / len(weight), 5)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a model folder")
    ap.add_argument("--init", default=None, help="an SFT run folder to start from (its adapter/ or model/)")
    ap.add_argument("--tasks", type=int, default=100, help="hermes_eval: the first N test tasks")
    ap.add_argument("--steps", type=int, default=2, help="online RL steps per path")
    ap.add_argument("--batch", type=int, default=2, help="online: tasks per step")
    ap.add_argument("--group", type=int, default=4, help="online: rollouts per task")
    ap.add_argument("--micro", type=int, default=4, help="online: episodes per forward/backward in the update")
    ap.add_argument("--turns", type=int, default=3, help="assistant turns per episode at most")
    ap.add_argument("--tokens", type=int, default=48, help="tokens generated per turn at most")
    ap.add_argument("--force-call", action=argparse.BooleanOptionalAction, default=True,
                    help="append a tool call to every turn-1 reply (all paths alike), so episodes reach turn 2")
    ap.add_argument("--quick", action="store_true", help="16 tasks and 1 online step")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    if args.quick:
        args.tasks, args.steps = min(args.tasks, 16), 1
    from trainers.runtime.device import set_threads, setup_env

    setup_env()
    set_threads(args.threads)
    b = Bench(args)
    out: dict = {"args": vars(args), "bf16": b.bf16, "load_1m": []}
    policy = b.build().eval()
    evals = {}
    for path in PATHS:
        evals[path] = b.hermes_eval(path, policy)
        out["load_1m"].append(round(os.getloadavg()[0], 2))
        print(f"hermes_eval {path}: {evals[path]['cpu_s']:.1f} CPU-s, {evals[path]['turns']} turns, "
              f"load {out['load_1m'][-1]}", flush=True)
    same = sum(a == b_ for a, b_ in zip(evals["plain"]["_ids"], evals["levers"]["_ids"]))
    same_bf16 = sum(a == b_ for a, b_ in zip(evals["plain"]["_results"], evals["new"]["_results"]))
    for e in evals.values():
        e.pop("_ids"), e.pop("_results")
    online = {}
    for path in PATHS:
        online[path] = b.online(path)
        out["load_1m"].append(round(os.getloadavg()[0], 2))
        print(f"online step {path}: {online[path]['cpu_s_per_step']:.1f} CPU-s/step (rollouts "
              f"{online[path]['rollout_cpu_s']:.1f}, update {online[path]['update_cpu_s']:.1f}), "
              f"drift {online[path]['logprob_drift']}, load {out['load_1m'][-1]}", flush=True)
    p, lv, nw = evals["plain"]["cpu_s"], evals["levers"]["cpu_s"], evals["new"]["cpu_s"]
    op, ol, on = (online[k]["cpu_s_per_step"] for k in PATHS)
    out.update(hermes_eval=evals, online=online, eval_levers_identical=f"{same}/{args.tasks}",
               eval_bf16_same_results=f"{same_bf16}/{args.tasks}",
               eval_ratio=round(p / nw, 2), eval_levers_ratio=round(p / lv, 2),
               online_ratio=round(op / on, 2), online_levers_ratio=round(op / ol, 2),
               update_levers_ratio=round(online["plain"]["update_cpu_s"] / online["levers"]["update_cpu_s"], 2),
               bf16_logprob_drift=online["new"]["logprob_drift"])
    what = f"{args.model}, bash_exec_env"
    bf = "levers + bf16" if b.bf16 else "levers (no bf16 here)"
    out["comparisons"] = [
        {"workload": f"hermes_eval CPU-s, {args.tasks} tasks, {what} ({bf}; exact levers alone "
                     f"{out['eval_levers_ratio']}x, {same}/{args.tasks} episodes identical)",
         "baseline": "transformers generate per turn, float32", "baseline_figure": f"{p:.1f} CPU-s",
         "figure": f"{nw:.1f} CPU-s", "ratio": out["eval_ratio"], "better": "higher", "target": ">= 3x"},
        {"workload": f"online RL step CPU-s, {args.batch}x{args.group} rollouts + update, {what} ({bf}; levers alone "
                     f"{out['online_levers_ratio']}x; bf16 log-prob drift {out['bf16_logprob_drift']} nats)",
         "baseline": "transformers generate per turn + whole-sequence float32 update",
         "baseline_figure": f"{op:.1f} CPU-s", "figure": f"{on:.1f} CPU-s", "ratio": out["online_ratio"],
         "better": "higher", "target": ">= 3x"}]
    print(f"hermes_eval: {p:.1f} -> {nw:.1f} CPU-s ({out['eval_ratio']}x; levers alone {out['eval_levers_ratio']}x, "
          f"identical episodes {same}/{args.tasks}; with bf16 same results {same_bf16}/{args.tasks}); online step: "
          f"{op:.1f} -> {on:.1f} CPU-s ({out['online_ratio']}x; levers alone {out['online_levers_ratio']}x, update "
          f"levers {out['update_levers_ratio']}x); bf16 {b.bf16}, log-prob drift {out['bf16_logprob_drift']}; "
          f"load {out['load_1m']}", flush=True)
    if args.json:
        print(json.dumps(out, indent=2))
    if args.json_out:
        bench_json.write(args.json_out, "generation", out)


if __name__ == "__main__":
    main()
