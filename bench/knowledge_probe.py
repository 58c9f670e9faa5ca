"""Does a model know the commands a task needs, apart from the tool-call format? Ask it in plain chat, run its answer.

Issue 24 asks SFT to raise success on whole task families never trained on (the test_families split) by 0.2; the
SmolLM2 SFT model gets 0.01-0.03 there and writes the nearest trained family's command instead. This probe asks
whether the knowledge was there to begin with: each task's instruction goes to the model as a plain chat question
("Give one shell command that does this: ... Reply with the command only."), no system prompt, no tools, greedy;
the first command of its reply (a fenced block, else an inline `code` span, else the first line) is run in the
task's sandbox as the `run` tool and the episode is submitted, so the environment's own checker grades it. A model
that knows a family's command solves its tasks here whatever format it was trained to answer in.

    python bench/knowledge_probe.py --model smollm2                   # the base model, bash and git, 20 tasks each
    python bench/knowledge_probe.py --model smollm2 --adapter RUN     # an SFT run, same questions
    python bench/knowledge_probe.py --quick                           # tiny model, 2 tasks: checks that it runs

Writes a table per split and template family and, with --json-out, every answer. Measured 2026-12-04
(bench/knowledge_probe/smollm2.json): SmolLM2-135M-Instruct solves 1 of 80 tasks (bash and git, test and
test_families, 20 each: `git checkout -b luto`); its answers are comments, `rm -rf /path/to/...`, `echo` of the
question or loops. The experts' one-command solutions pass this path (73 of 73). An SFT model trained on the tool-call
format answers these plain questions with a tool call gone wrong (smollm2_sft96.json: `<` repeated in 38 of 40).
"""
from __future__ import annotations

import bench_json  # first: importing it notes the load average at the start
import argparse
import json
import re
import time
from collections import defaultdict

import envs
from transcript.toolcalls import format_tool_call

ENVS = ("bash_exec_env", "git_repo_env")  # command envs: one command can solve a task (python_debug edits code)
QUESTION = "Give one shell command that does this: {instruction} Reply with the command only."
FENCE = re.compile(r"```[a-zA-Z]*\n(.*?)(?:```|$)", re.S)
INLINE = re.compile(r"`([^`\n]+)`")


def first_command(reply: str) -> str:
    """The command a free-form reply gives: the first non-comment line of its first fenced block, else its first
    inline `code` span, else its first line (a `$ ` prompt stripped)."""
    fenced = FENCE.search(reply)
    if fenced:
        lines = [x.strip() for x in fenced.group(1).splitlines()]
        lines = [x for x in lines if x and not x.startswith("#")]
        cmd = lines[0] if lines else ""
    else:
        inline = INLINE.search(reply)
        cmd = inline.group(1) if inline else (reply.strip().splitlines() or [""])[0]
    return cmd.strip().removeprefix("$ ").strip()


def probe(model, tok, env_name: str, split: str, limit: int, max_new_tokens: int) -> list[dict]:
    """The split's first `limit` tasks (built-in tasks cycle through the split's families, so every family is asked
    about equally often, as hermes_eval --limit evaluates), asked in one batch, each answer run in its task's sandbox."""
    from trainers.generation.generate import Sampling, generate

    env = envs.make(env_name, split=split)
    suite = env.unwrapped.suite
    tasks = [suite.task(split, i) for i in range(min(limit, suite.count(split)))]
    rows = []
    try:
        prompts = [tok.apply_chat_template([{"role": "user", "content": QUESTION.format(instruction=t.instruction)}],
                                           add_generation_prompt=True, tokenize=True, return_dict=False)
                   for t in tasks]
        gens = generate(model, tok, prompts, Sampling(max_new_tokens=max_new_tokens))
        for i, (task, gen) in enumerate(zip(tasks, gens)):
            reply = tok.decode(gen.token_ids, skip_special_tokens=True)
            cmd = first_command(reply)
            env.reset(options={"split": split, "index": i})
            success = False
            if cmd:
                env.step(format_tool_call("run", {"command": cmd}))
                success = bool(env.step(format_tool_call("submit", {}))[4].get("success"))
            rows.append({"env": env_name, "split": split, "index": i, "template": task.template,
                         "instruction": task.instruction, "reply": reply, "command": cmd, "success": success})
    finally:
        env.close()
    return rows


def table(rows: list[dict]) -> list[str]:
    by = defaultdict(list)
    for r in rows:
        by[(r["env"], r["split"], r["template"])].append(r["success"])
        by[(r["env"], r["split"], "(all)")].append(r["success"])
    out = ["| env | split | family | tasks | solved |", "|---|---|---|---:|---:|"]
    for (e, s, t), v in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "(all)", kv[0][2])):
        out.append(f"| {e} | {s} | {t} | {len(v)} | {sum(v) / len(v):.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="tiny | smollm2 | a model folder")
    ap.add_argument("--adapter", help="a training run folder whose adapter or weights to ask instead of the base")
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS), help="environments to ask")
    ap.add_argument("--splits", nargs="+", default=["test", "test_families"], help="splits to ask")
    ap.add_argument("--limit", type=int, default=20, help="tasks per split, spread over its families")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="reply length cap")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 tasks a split: checks that it runs")
    ap.add_argument("--json-out", help="write the table's figures and every answer here")
    a = ap.parse_args()
    if a.quick:
        a.model, a.limit, a.max_new_tokens = "tiny", 2, 16
    import torch

    from trainers.modeling.models import load_model, load_tokenizer, resolve_model

    torch.set_num_threads(a.threads)
    path = resolve_model(a.model)
    tok = load_tokenizer(path)
    model = load_model(path, adapter=a.adapter, device=torch.device("cpu")).eval()
    t0 = time.perf_counter()
    rows = []
    for env_name in a.envs:
        for split in a.splits:
            rows += probe(model, tok, env_name, split, a.limit, a.max_new_tokens)
    lines = table(rows)
    print("\n".join(lines))
    print(f"{len(rows)} tasks in {time.perf_counter() - t0:.0f} s ({a.model}{' + ' + a.adapter if a.adapter else ''})")
    if a.json_out:
        bench_json.write(a.json_out, "knowledge_probe", {"model": a.model, "adapter": a.adapter, "table": lines,
                                                         "rows": rows})


if __name__ == "__main__":
    main()
