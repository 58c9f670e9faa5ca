"""hermes_eval: run a model greedily through an environment's held-out tasks and score it.

Multi-turn and token-in/token-out: the prompt is rendered once by the chat template, then each turn appends
the model's generated tokens and the encoded tool turn (`<|im_start|>tool\\n<tool_response>...`), exactly as the
template renders a conversation for training. Episodes run in batches (one left-padded `generate` per turn for
every live episode), stop when the environment says so (submit, or a reply without a tool call), and every
episode plus a summary go to the lake.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from .chat import normalize_tools, parse_tool_calls
from .config import DEFAULT_SEED, device as pick_device, set_threads, setup_env
from .errors import TrainerInputError

TASK_ALIASES = {"debug-python": "python_debug_env", "python": "python_debug_env", "python-debug": "python_debug_env",
                "shell": "bash_exec_env", "bash": "bash_exec_env", "git": "git_repo_env"}


@dataclass
class EvalSettings:
    model: str = "tiny"
    task: str = "shell"
    split: str = "test"
    adapter: str | None = None
    limit: int | None = None
    offset: int = 0
    seed: int = DEFAULT_SEED
    max_new_tokens: int = 128
    max_turns: int = 6
    max_context: int = 2048
    batch_size: int = 64
    lake_root: str | None = None
    record_in_lake: bool = True
    threads: int | None = None
    chat_template: str | None = None
    tasks_file: str | None = None
    progress: bool = True


def resolve_env_name(task: str) -> str:
    import envs

    name = TASK_ALIASES.get(task, task)
    known = _known_envs()
    if known and name not in known:
        raise TrainerInputError(f"unknown task/environment {task!r}: use one of debug-python, shell, git or "
                                f"{', '.join(sorted(known))}")
    return name


def _known_envs() -> list[str]:
    from .models import _env_names

    try:
        return list(_env_names())
    except Exception:
        return []


def _load_eval_tasks(env_name: str, split: str, tasks_file: str | None):
    import envs

    try:
        if tasks_file:
            tasks = [t for t in envs.load_tasks_file(tasks_file) if t.split == split]
        else:
            tasks = envs.load_tasks(env_name, split)
    except TrainerInputError:
        raise
    except Exception as exc:
        raise TrainerInputError(f"cannot load {split} tasks of {env_name}: {exc}") from None
    tasks = list(tasks)
    if not tasks:
        raise TrainerInputError(f"{env_name} has no {split} tasks")
    return tasks


def _tid(t) -> str:
    return t["task_id"] if isinstance(t, dict) else getattr(t, "task_id")


def initial_messages(obs, info: dict) -> list[dict]:
    """The conversation an episode starts from: the env's own messages when it gives them, else system + user(obs)."""
    if isinstance(info.get("messages"), list) and info["messages"]:
        return [dict(m) for m in info["messages"]]
    msgs = []
    system = info.get("system_prompt") or info.get("system")
    if system:
        msgs.append({"role": "system", "content": str(system)})
    msgs.append({"role": "user", "content": str(obs)})
    return msgs


def tool_turn_text(observation: str) -> str:
    """What the chat template renders after an assistant turn's <|im_end|>: newline, the tool turn, the next prompt."""
    return f"\n<|im_start|>tool\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def generate_batch(model, tok, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuation of each prompt (left padded), up to and including <|im_end|>."""
    import torch

    dev = next(model.parameters()).device
    L = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.full((len(prompts), L), pad, dtype=torch.long)
    att = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        att[i, L - len(p):] = 1
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=eos, pad_token_id=pad, temperature=None, top_p=None, top_k=None)
    res = []
    for row in out[:, L:].tolist():
        new = []
        for t in row:
            new.append(t)
            if t == eos:
                break
        while new and new[-1] == pad and pad != eos:
            new.pop()
        res.append(new)
    return res


class Episode:
    def __init__(self, env, task, env_name: str, seed: int, tok):
        self.env, self.task, self.task_id, self.seed = env, task, _tid(task), seed
        obs, info = env.reset(seed=seed, options={"task_id": self.task_id})
        self.tools = normalize_tools(info.get("tools"))
        self.messages = initial_messages(obs, info)
        self.ids = list(tok.apply_chat_template(self.messages, tools=self.tools, tokenize=True,
                                                add_generation_prompt=True, return_dict=True)["input_ids"])
        self.prompt_tokens = len(self.ids)
        self.steps: list[dict] = []
        self.reward, self.success, self.done, self.turns = 0.0, False, False, 0
        self.valid_calls, self.replies = 0, 0
        self.last_info: dict = {}
        self.env_tags = list(info.get("env_tags") or info.get("tags") or [])
        self.last_obs = str(obs)

    def advance(self, tok, new_ids: list[int], max_turns: int, max_context: int):
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        text = tok.decode(new_ids, skip_special_tokens=True)
        calls = parse_tool_calls(text)
        self.replies += 1
        self.valid_calls += bool(calls)
        content = text.split("<tool_call>")[0].strip() if calls else text.strip()
        msg = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = [{"id": f"call_{self.turns}_{j}", "name": c["name"], "arguments": c["arguments"]}
                                 for j, c in enumerate(calls)]
        self.messages.append(msg)
        obs, r, term, trunc, info = self.env.step(text)
        self.turns += 1
        self.reward += float(r or 0.0)
        self.last_info = info or {}
        self.steps.append({"observation": self.last_obs, "thought": content or None, "action": text,
                           "result": str(obs), "reward": float(r or 0.0), "done": bool(term or trunc)})
        self.last_obs = str(obs)
        if term or trunc or self.turns >= max_turns:
            self.done = True
        else:
            self.messages.append({"role": "tool", "content": str(obs), "tool_call_id": msg.get("tool_calls", [{}])[0].get("id")})
            if not new_ids or new_ids[-1] != eos:
                new_ids = new_ids + [eos]
            self.ids += new_ids + tok.encode(tool_turn_text(str(obs)), add_special_tokens=False)
            if len(self.ids) >= max_context:
                self.done = True
        if self.done:
            succ = self.last_info.get("success")
            self.success = bool(succ) if succ is not None else self.reward >= 1.0 - 1e-9

    def result(self) -> dict:
        return {"task_id": self.task_id, "reward": round(self.reward, 4), "success": self.success, "turns": self.turns,
                "valid_tool_call_rate": self.valid_calls / max(1, self.replies),
                "final_action": self.steps[-1]["action"][:300] if self.steps else ""}


def play(episodes: list["Episode"], generate, tok, s: EvalSettings, on_done=None) -> float:
    """Run episodes to the end: each round, one batched `generate(prompts, episodes) -> new token lists` call per
    `s.batch_size` live episodes (shortest prompts together), then one env step per episode. Returns the
    seconds spent generating."""
    gen_s = 0.0
    while True:
        live = [e for e in episodes if not e.done]
        if not live:
            return gen_s
        live.sort(key=lambda e: len(e.ids))
        for b in range(0, len(live), s.batch_size):
            chunk = live[b : b + s.batch_size]
            tg = time.perf_counter()
            outs = generate([e.ids for e in chunk], chunk)
            gen_s += time.perf_counter() - tg
            for e, new in zip(chunk, outs):
                e.advance(tok, new, s.max_turns, s.max_context)
                if e.done and on_done:
                    on_done()


def run_eval(s: EvalSettings, console=None) -> dict:
    setup_env()
    import envs

    from .models import load_model, load_tokenizer, model_label, resolve_adapter, resolve_model

    env_name = resolve_env_name(s.task)
    tasks = _load_eval_tasks(env_name, s.split, s.tasks_file)
    tasks = tasks[s.offset :]
    if s.limit:
        tasks = tasks[: s.limit]
    model_path = resolve_model(s.model)
    adapter = resolve_adapter(s.adapter)
    set_threads(s.threads)
    import torch

    tok_path = adapter if adapter and (Path(adapter) / "tokenizer_config.json").exists() else model_path
    tok = load_tokenizer(tok_path, s.chat_template)
    torch.manual_seed(s.seed)
    model = load_model(model_path, adapter).to(pick_device()).eval()
    run_id = f"eval-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    t0 = time.perf_counter()
    episodes: list[Episode] = []
    for i, t in enumerate(tasks):
        env = envs.make(env_name, tasks=s.tasks_file) if s.tasks_file else envs.make(env_name, split=s.split)
        episodes.append(Episode(env, t, env_name, s.seed + i, tok))
    prog = _progress(console, len(episodes)) if s.progress else None
    try:
        gen_s = play(episodes, lambda prompts, _eps: generate_batch(model, tok, prompts, s.max_new_tokens), tok, s,
                     (lambda: prog[0].advance(prog[1])) if prog else None)
    finally:
        if prog:
            prog[0].stop()
        for e in episodes:
            try:
                e.env.close()
            except Exception:
                pass
    wall = time.perf_counter() - t0
    results = [e.result() for e in episodes]
    n = len(results)
    label = model_label(s.model)
    summary = {"run_id": run_id, "kind": "eval", "env": env_name, "split": s.split, "model": label,
               "adapter": adapter, "episodes": n, "success_rate": sum(r["success"] for r in results) / n,
               "mean_reward": sum(r["reward"] for r in results) / n,
               "valid_tool_call_rate": sum(r["valid_tool_call_rate"] for r in results) / n,
               "mean_turns": sum(r["turns"] for r in results) / n, "wall_s": round(wall, 3), "generate_s": round(gen_s, 3),
               "seed": s.seed, "per_task": results}
    if s.record_in_lake:
        summary["lake_versions"] = _record(s, summary, episodes, env_name, label, adapter)
    return summary


def _progress(console, total):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(TextColumn("[bold green]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)
    p.start()
    return p, p.add_task("eval", total=total)


def _record(s: EvalSettings, summary: dict, episodes: list[Episode], env_name: str, label: str, adapter: str | None) -> dict:
    import os

    try:
        from lake import Lake
    except ImportError:
        return {}
    lake = Lake.init(s.lake_root or os.environ.get("LAKE_ROOT") or "data/lake")
    policy = adapter or "base"
    rows = []
    for e in episodes:
        rows.append({"trajectory_id": str(uuid.uuid4()), "group_id": summary["run_id"], "task_id": e.task_id,
                     "env": env_name, "env_tags": e.env_tags, "split": s.split, "model": label, "policy_version": policy,
                     "messages": e.messages, "steps": e.steps, "reward": e.reward, "success": e.success,
                     "metadata": {"eval_run_id": summary["run_id"], "seed": e.seed, "adapter": adapter,
                                  "tools": e.tools, "source": "hermes_eval"}})
    tv = lake.append("trajectories", rows)
    cfg = {k: v for k, v in asdict(s).items()}
    metrics = {k: v for k, v in summary.items() if k not in ("per_task", "run_id", "kind", "model", "adapter")}
    rv = lake.append("runs", [{"run_id": summary["run_id"], "kind": "eval", "status": "completed", "model": label,
                               "adapter_path": adapter, "config": cfg, "metrics": metrics,
                               "metadata": {"per_task": summary["per_task"], "env": env_name, "split": s.split}}])
    return {"trajectories": getattr(tv, "version", None), "runs": getattr(rv, "version", None)}
