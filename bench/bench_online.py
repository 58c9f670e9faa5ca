"""Online RL throughput: rl_train_online's loop vs a plain TRL GRPOTrainer, same model, tasks and sizes, same run.

Both train the same model (the cached tiny Llama unless --model / --init) on the first --tasks train tasks of
bash_exec_env, --batch tasks x --group rollouts per step, for --steps steps, at the same learning rate, full
fine-tuning, sampling at temperature 1:
- ours: trainers.rl.online (multi-turn episodes that end when the environment says so or at --turns turns, one
  batched `generate` per turn for every live episode, every rollout written to a fresh lake);
- TRL: GRPOTrainer with environment_factory=trainers.rl.trl_env.environment_factory("bash_exec_env") (the same
  environment as tools; TRL ends an episode when the model stops calling tools, at most --turns tool-calling
  iterations, and caps the whole episode at max_completion_length = --tokens x --turns), plain transformers
  generation, no vLLM, no lake.
The two are run alternately (--rounds) so a change in the machine's load hits both. Reported per side: wall
seconds of the training steps (ours: its own step times, evaluations excluded; TRL: trainer.train()), rollouts/s
= episodes / wall, training tokens/s = tokens of the episodes that went through the update (prompt + completion,
TRL's num_tokens) / wall, and the ratio ours / TRL. The 1-minute load average is printed beside each figure.

usage: python bench/bench_online.py [--steps 6] [--batch 2] [--group 4] [--turns 2] [--tokens 48] [--tasks 16]
                                    [--rounds 2] [--init RUN] [--threads 1] [--json]
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV = "bash_exec_env"
LR = 1e-4


def load() -> float:
    return os.getloadavg()[0]


def ours(args, work: Path) -> dict:
    from lake import Lake
    from trainers.rl.online import run_online
    from trainers.rl.config import OnlineConfig

    cfg_file = _project_file(args, work)
    Lake.init(work / "lake")
    tasks = work / "tasks.jsonl"
    tasks.write_text(_task_lines(args.tasks))
    l0 = load()
    s = run_online(OnlineConfig(env=ENV, steps=args.steps, eval_interval=args.steps, model=args.model, init=args.init,
                                config=str(cfg_file), tasks_file=str(tasks), output=str(work / "run"),
                                lake_root=str(work / "lake"), threads=args.threads, progress=False, plot=False))
    steps = [json.loads(x) for x in (work / "run" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "policy_version" in r]
    wall = sum(r["rollout_s"] + r["update_s"] for r in steps)
    tokens = sum(r["episode_tokens"] for r in steps)
    return {"wall_s": wall, "rollouts": s["rollouts"], "tokens": tokens, "rollouts_per_s": s["rollouts"] / wall,
            "tokens_per_s": tokens / wall, "turns_per_rollout": sum(r["turns"] for r in steps) / s["rollouts"],
            "reward_mean": sum(r["reward_mean"] for r in steps) / len(steps), "load": round((l0 + load()) / 2, 2)}


def _project_file(args, work: Path) -> Path:
    """The lachesis.toml both sides train with (sizes, learning rate, the default step-reward weights)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "lachesis.toml"
    path.write_text(f"learning_rate = {LR}\nbatch_size = {args.batch}\ngroup_size = {args.group}\n"
                    f"max_turns = {args.turns}\nmax_completion_length = {args.tokens}\neval_episodes = 1\n"
                    f"checkpoint_every = {args.steps}\ntemperature = 1.0\n")
    return path


def _task_lines(n: int) -> str:
    """The first n built-in train tasks as a tasks file (both sides read the same tasks; test rows for our eval)."""
    import envs

    rows = [t.as_record() for t in envs.load_tasks(ENV, "train")[:n]]
    rows += [{**r, "task_id": r["task_id"] + "-test", "split": "test"} for r in rows[:1]]
    return "".join(json.dumps(r) + "\n" for r in rows)


def trl(args, work: Path) -> dict:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from trainers.runtime.device import cpu_defaults
    from trainers.modeling.models import load_tokenizer
    from trainers.modeling.policy import resolve_spec
    from trainers.rl.project_config import load_config, reward_weights
    from trainers.rl.trl_env import environment_factory, grpo_dataset, hermes_tool_parser

    spec = resolve_spec(args.model, args.init, 16, 32)
    tasks = work / "tasks.jsonl"
    tasks.write_text(_task_lines(args.tasks))
    episodes: list[dict] = []
    weights = reward_weights(load_config(_project_file(args, work)))  # the step rewards ours trains on
    Env = environment_factory(ENV, tasks=str(tasks), max_steps=args.turns + 1, reward_weights=weights,
                              on_episode=episodes.append)
    tok = hermes_tool_parser(load_tokenizer(spec.tokenizer_path))
    conf = GRPOConfig(output_dir=str(work / "trl"), max_steps=args.steps, per_device_train_batch_size=args.batch * args.group,
                      num_generations=args.group, max_completion_length=args.tokens * args.turns,
                      max_tool_calling_iterations=args.turns, learning_rate=LR, temperature=1.0, beta=0.0,
                      logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True, **cpu_defaults())
    torch.manual_seed(0)
    trainer = GRPOTrainer(model=spec.base, args=conf, train_dataset=grpo_dataset(ENV, tasks=str(tasks)),
                          processing_class=tok, environment_factory=Env)
    l0 = load()
    t = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t
    tokens = max(h.get("num_tokens", 0) for h in trainer.state.log_history)
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"wall_s": wall, "rollouts": len(episodes), "tokens": tokens, "rollouts_per_s": len(episodes) / wall,
            "tokens_per_s": tokens / wall,
            "turns_per_rollout": sum(e["tool_calls"] + 1 for e in episodes) / max(1, len(episodes)),
            "reward_mean": sum(rewards) / max(1, len(rewards)), "load": round((l0 + load()) / 2, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2, help="tasks per step")
    ap.add_argument("--group", type=int, default=4, help="rollouts per task")
    ap.add_argument("--turns", type=int, default=2, help="assistant turns (TRL: tool-calling iterations) per episode")
    ap.add_argument("--tokens", type=int, default=48, help="tokens per turn")
    ap.add_argument("--tasks", type=int, default=16, help="train tasks of bash_exec_env used")
    ap.add_argument("--rounds", type=int, default=2, help="ours then TRL, this many times")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--init", default=None, help="an SFT run folder to start both from (e.g. the demo's run)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--json-out", help="also write the results with date, machine and load here")
    args = ap.parse_args()
    from trainers.runtime.device import set_threads, setup_env

    setup_env()
    set_threads(args.threads)
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-online-") as tmp:
            a = ours(args, Path(tmp) / "ours")
        with tempfile.TemporaryDirectory(prefix="bench-online-") as tmp:
            b = trl(args, Path(tmp))
        rounds.append({"ours": a, "trl": b, "rollouts_ratio": a["rollouts_per_s"] / b["rollouts_per_s"],
                       "tokens_ratio": a["tokens_per_s"] / b["tokens_per_s"]})
        print(f"round {r + 1}: rollouts/s ours {a['rollouts_per_s']:.2f} vs TRL {b['rollouts_per_s']:.2f} "
              f"({rounds[-1]['rollouts_ratio']:.2f}x); training tokens/s ours {a['tokens_per_s']:.0f} vs TRL "
              f"{b['tokens_per_s']:.0f} ({rounds[-1]['tokens_ratio']:.2f}x); turns/rollout ours "
              f"{a['turns_per_rollout']:.2f} TRL {b['turns_per_rollout']:.2f}; load {a['load']} / {b['load']}",
              flush=True)
    out = {"args": vars(args), "rounds": rounds, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps(out, indent=2))
    if args.json_out:
        bench_json.write(args.json_out, "online", out)


if __name__ == "__main__":
    main()
