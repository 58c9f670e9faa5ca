"""hermes_eval: run a model greedily through an environment's held-out tasks and score it.

Multi-turn and token-in/token-out: the prompt is rendered once by the chat template, then each turn appends
the model's generated tokens and the template's own rendering of the tool turns that answer them
(chat.turn_continuation), so the prompt is token for token the template's rendering of the conversation,
as in training. Episodes run in batches (one batched trainers.generation.generate call per turn for every live episode:
the shared system/tools prefix computed once, each episode's KV cache kept across its turns, optionally a merged
bf16 copy of the model), stop when the environment says so (submit, a reply without a tool call, or its step
limit, which is `max_turns`), and are recorded by transcript/recorder.py, the recorder every writer of trajectories uses.
Every episode plus a summary go to an existing lake (a missing lake is an error, never created here).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import asdict, replace
from pathlib import Path

import envs
from envs.core.episode import EpisodeLost
from lake import Lake
from trainers.generation.episodes import Episode, play
from trainers.eval.config import EvalSettings
from trainers.generation.generate import Sampling, Turns, rollout_model, use_bf16
from trainers.runtime.device import set_threads, setup_env
from trainers.runtime.device import device as pick_device
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.progress import Progress
from trainers.runtime.runfolder import trainer_lake

SOURCE = "hermes_eval"


def load_eval_tasks(env_name: str, split: str, tasks_file: str | None) -> list[envs.Task]:
    try:
        if tasks_file:
            tasks = [t for t in envs.load_tasks_file(tasks_file) if t.split == split]
        else:
            tasks = envs.load_tasks(env_name, split)
    except (envs.TaskFileError, FileNotFoundError, ValueError, TypeError) as exc:
        raise TrainerInputError(f"cannot load {split} tasks of {env_name}: {exc}") from None
    if not tasks:
        raise TrainerInputError(f"{env_name} has no {split} tasks")
    return tasks


def run_eval(s: EvalSettings, console=None) -> dict:
    setup_env()
    from trainers.modeling.models import (
        model_label,
        resolve_adapter,
        resolve_model,
        untrained_note,
    )

    dev = pick_device(s.device)  # before any model work: --device cuda without CUDA is the one-line error
    env_name = s.task  # resolved by EvalSettings
    tasks = load_eval_tasks(env_name, s.split, s.tasks_file)
    tasks = tasks[s.offset :]
    if s.limit:
        tasks = tasks[: s.limit]
    # the lake the episodes go to, opened before any model work so a wrong --lake fails at once
    lake = trainer_lake(s.lake_root, "pass --no-lake") if s.record_in_lake else None
    if s.model is None and s.adapter:  # the run's own base model, as rl_train_online --init reads it
        from trainers.modeling.policy import run_base_model

        spec, model_path = run_base_model(s.adapter, "--adapter")
        s = replace(s, model=spec)
    else:
        s = replace(s, model=s.model or "tiny")
        model_path = resolve_model(s.model)
    adapter = resolve_adapter(s.adapter)
    note = untrained_note(s.model, "--adapter", adapter)
    if note and console is not None and s.progress:  # not from the online trainer's own evaluations
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    run_id = f"eval-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    label = model_label(s.model)
    writer = EpisodeWriter(lake, run_id=run_id, model=label, adapter=adapter) if lake is not None else None
    try:
        if s.ray:  # the same episodes played by Ray workers (trainers/eval/ray_eval.py), recorded here all the same
            from trainers.eval.ray_eval import evaluate_on_ray

            summary = evaluate_on_ray(s, tasks, console, run_id=run_id, label=label, adapter=adapter,
                                      on_record=writer.add_record if writer else None)
        else:
            model, tok = load_eval_model(s, model_path, adapter, dev)
            summary, _ = evaluate_model(model, tok, s, tasks, console, run_id=run_id, label=label, adapter=adapter,
                                        on_episode=writer.add if writer else None)
    finally:
        if writer is not None:
            writer.flush()  # what a stopped evaluation played is in the lake too
    if writer is not None:
        summary["lake_versions"] = {"trajectories": writer.version, "runs": _record_run(lake, s, summary, label,
                                                                                          adapter)}
    return summary


def load_eval_model(s: EvalSettings, model_path: str, adapter: str | None, dev):
    """(model, tokenizer) as hermes_eval generates with them: the adapter's tokenizer when it has one, the merged
    bf16 copy where --bf16 says so (run_eval, and each Ray worker of --ray)."""
    from trainers.modeling.models import load_model, load_tokenizer

    set_threads(s.threads)
    import torch

    tok_path = adapter if adapter and (Path(adapter) / "tokenizer_config.json").exists() else model_path
    tok = load_tokenizer(tok_path, s.chat_template)
    torch.manual_seed(s.seed)
    model = load_model(model_path, adapter, device=dev).eval()
    if use_bf16(s.bf16, dev):  # generate with the merged bf16 copy alone: the float32 model is not needed
        model = rollout_model(model, True)
    return model, tok


def evaluate_model(model, tok, s: EvalSettings, tasks: list[envs.Task], console=None, *, run_id: str, label: str,
                   adapter: str | None = None, on_episode=None) -> tuple[dict, list[Episode]]:
    """Greedy episodes of a loaded model on `tasks` (s.task's environment) and their summary; nothing is recorded
    here (run_eval records them as they end through `on_episode(episode)`; online RL evaluates its current policy
    with this and records them its own way). The model generates as given (s.bf16 is applied by the caller: run_eval,
    or online RL's rollout copy). At most `s.batch_size` episodes are live at once, each with its own environment
    (for a web task, one browser tab), the next started as one ends and its environment closed; an episode whose
    every reset failed in the environment is counted in `lost` and left out."""
    t0 = time.perf_counter()
    started: list[Episode] = []  # every episode begun (what a stopped evaluation left open is closed from here)
    finished: list[Episode] = []
    lost: list[dict] = []

    def starts():
        for i, t in enumerate(tasks):
            # a task file was read once (load_eval_tasks): each episode's environment gets its own task only
            env_kw: dict = {"tasks": [t]} if s.tasks_file else {"split": s.split}
            env = envs.make(s.task, max_steps=s.max_turns, **env_kw)
            try:
                e = Episode(env, t.task_id, s.seed + i, tok)
            except EpisodeLost as exc:
                env.close()
                lost.append({"task_id": t.task_id, "reason": str(exc)})
                prog.advance()
                continue
            started.append(e)
            yield e

    def done(e: Episode) -> None:
        e.env.close()
        finished.append(e)
        prog.advance()
        if on_episode is not None:
            on_episode(e)

    prog = Progress(console if s.progress else None, "eval", len(tasks), unit="episodes", style="bold green")
    try:
        with prog:
            gen = Turns(model, tok, Sampling(max_new_tokens=s.max_new_tokens, stop_repetition=s.stop_repetition),
                        reuse_kv=s.reuse_kv)
            gen_s = play(starts(), gen, tok, s.batch_size, s.max_context, done, forget=gen.forget,
                         window=s.batch_size)
    finally:
        for e in started:
            if not e.done:
                e.env.close()
    wall = time.perf_counter() - t0
    order = {t.task_id: i for i, t in enumerate(tasks)}
    finished.sort(key=lambda e: order.get(e.task_id, 0))
    summary = eval_summary(s, [e.result() for e in finished], lost, sum(1 for e in finished if e.fault),
                           run_id=run_id, label=label, adapter=adapter, wall_s=wall, generate_s=gen_s)
    return summary, finished


def eval_summary(s: EvalSettings, results: list[dict], lost: list[dict], faults: int, *, run_id: str, label: str,
                 adapter: str | None, wall_s: float, generate_s: float) -> dict:
    """An evaluation's summary from its episodes' results in task order (one process's, or the Ray workers' put
    together: the same figures from the same results)."""
    n = max(1, len(results))
    summary = {"run_id": run_id, "kind": "eval", "env": s.task, "split": s.split, "model": label,
               "adapter": adapter, "episodes": len(results), "success_rate": sum(r["success"] for r in results) / n,
               "mean_reward": sum(r["reward"] for r in results) / n,
               "valid_tool_call_rate": sum(r["valid_tool_call_rate"] for r in results) / n,
               "first_call_valid_rate": sum(r["first_call_valid"] for r in results) / n,
               "repetition_stops": sum(r["repetition_stops"] for r in results),
               "length_stops": sum(r["length_stops"] for r in results),
               "loops_at_limit": sum(r["loops_at_limit"] for r in results),
               "mean_turns": sum(r["turns"] for r in results) / n, "wall_s": round(wall_s, 3),
               "generate_s": round(generate_s, 3),
               "seed": s.seed, "lost": lost, "faults": faults,
               "peak_rss_mb": peak_rss_mb(), "per_task": results}
    return summary


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB): what an evaluation holds at most, its browsers aside."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def episode_record(e: Episode, *, run_id: str, model: str, adapter: str | None) -> dict:
    """One evaluation episode as a trajectory record (transcript/recorder.py's rules; the fault, when the environment
    failed on every try)."""
    meta = {"eval_run_id": run_id, "adapter": adapter, **({"fault": e.fault} if e.fault else {})}
    return e.recorder.record(model=model, policy_version=adapter or "base", source=SOURCE, group_id=run_id,
                             seed=e.seed, metadata=meta)


class EpisodeWriter:
    """Evaluation episodes into the lake as they end: one commit per COMMIT_EVERY episodes and one at `flush()`."""

    COMMIT_EVERY = 25

    def __init__(self, lake: Lake, *, run_id: str, model: str, adapter: str | None):
        self.lake, self.run_id, self.model, self.adapter = lake, run_id, model, adapter
        self.pending: list[dict] = []
        self.version: int | None = None

    def add(self, e: Episode) -> None:
        self.add_record(episode_record(e, run_id=self.run_id, model=self.model, adapter=self.adapter))

    def add_record(self, record: dict) -> None:
        """An episode_record made elsewhere (a Ray worker's), committed as `add`'s are."""
        self.pending.append(record)
        if len(self.pending) >= self.COMMIT_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.version = self.lake.append("trajectories", self.pending).version
            self.pending = []


def _record_run(lake: Lake, s: EvalSettings, summary: dict, label: str, adapter: str | None) -> int:
    metrics = {k: v for k, v in summary.items() if k not in ("per_task", "run_id", "kind", "model", "adapter")}
    rv = lake.append("runs", [{"run_id": summary["run_id"], "kind": "eval", "status": "completed", "model": label,
                               "adapter_path": adapter, "config": asdict(s), "metrics": metrics,
                               "metadata": {"per_task": summary["per_task"], "env": summary["env"],
                                            "split": s.split}}])
    return rv.version
