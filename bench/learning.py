"""The guide's four strategies, several seeds, through the real console commands: does each make the agent better?

Every model is trained and evaluated by the commands a user runs (`lake rollout`, `rl_finetune_supervised`,
`rl_edit_config`, `rl_train_online`, `rl_transfer_init` + `rl_train_transfer`, `skill_to_instruction` +
`llm_finetune`, `hermes_eval`), each run stopping on a fixed, seeded step count (never wall time), so a rerun on
another machine trains the same models; only the duration differs. What the commands cannot say (the loss of a
model on held-out chats, a tuned model's answer to a held-out skill) is computed here with the trainers' own
encoding and loss, on the saved run folders.

1. SFT from lake trajectories: expert rollouts of bash_exec_env's train split in a lake, `rl_finetune_supervised
   --data sft`; held-out (test split) success before and after, and the loss on held-out expert chats.
2. Online RL from the SFT model: `rl_train_online --init <the seed's SFT run>` with reward_scale 1.0 and 2.5
   (`rl_edit_config reward_scale 2.5`, one project file per arm); its own test evaluations every few steps.
3. Transfer bash_exec_env -> git_repo_env: `rl_transfer_init --from <the seed's SFT run> --freeze_layers L` +
   `rl_train_transfer --method sft` on the git lake, against the same base trained on the same git rows without
   transfer (`rl_finetune_supervised`, same lr, batch and steps); git test success and held-out loss, steps to
   reach a success level.
4. Instruction tuning from skills: `skill_to_instruction` over the packaged Hermes skill corpus, skills split by
   a stable hash of their name into train and held-out, `llm_finetune --method sft` on the train skills; the loss
   on the held-out skills' pairs before and after, and whether the tuned model's answer to a held-out skill's
   task names that skill's steps (its commands and code terms), with the train skills' answers beside it.

A curve point at step k is a run of exactly k steps (its own warm-up and decay), so each point is a finished
model, as a user would get it. Figures are means over seeds with a 95% t-interval; the table, the raw records
and one PNG per strategy (held-out success against steps, the seeds' band; held-out loss for strategy 4) go to
--out. The commands and the statistics over seeds are harness.py's, the strategies' runs and sizes strategies.py's
(shared with the arm benches: online_arms.py, transfer_arms.py, reference_mix.py); this file is the bench itself:
the setup, the held-out measures, the whole run, its table and plots.

    python bench/learning.py                 # the full run (tiny model, 3 seeds, about 60 min on 2 quiet cores)
    python bench/learning.py --quick         # 2 seeds, a few steps: checks that everything runs (minutes)
    python bench/learning.py --model smollm2 # the same code with the pretrained model (LoRA; a GPU if present)
    python bench/learning.py --model smollm2 --size short  # 2 seeds, a dozen steps, 20 tasks: ~2 h on 2 CPU cores
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench_json import machine
from harness import (BASH, GIT, ROOT, Commands, band, by, first_step_at, fmt_ci, pool, run_in_work, time_spent,
                     work_folder, work_options)
from strategies import (NO_TRANSFER, PRETRAINED, SIZES, Size, strategy_instruct, strategy_no_transfer,
                        strategy_online, strategy_sft, strategy_transfer, transfer_arm)

SUCCESS_LEVEL = 0.05  # "steps to reach a success level" in strategy 3: 5 of 100 held-out tasks
RATE_KEYS = ("success", "heldout_names_steps")  # fractions of tasks or skills: in [0, 1]


def setup(c: Commands, size: Size) -> dict:
    lakes = {k: c.work / f"lake_{k}" for k in ("bash", "git", "heldout")}
    for k, path in lakes.items():
        c.run("lake", "init", "--lake", path, log=f"init-{k}")
    c.run("lake", "rollout", "--env", BASH, "--policy", "expert", "--episodes", size.bash_expert, "--lake",
          lakes["bash"], log="rollout-bash")
    c.run("lake", "rollout", "--env", GIT, "--policy", "expert", "--episodes", size.git_expert, "--lake",
          lakes["git"], log="rollout-git")
    for env in (BASH, GIT):
        c.run("lake", "rollout", "--env", env, "--policy", "expert", "--split", "test", "--episodes", size.heldout,
              "--lake", lakes["heldout"], log=f"rollout-heldout-{env}")
    skills_dir = c.work / "skills"
    from ingest.samples import sample_skills_tree

    sample_skills_tree(skills_dir)
    c.run("skill_to_instruction", "--skills", skills_dir, "--min-uses", 0, "--provenance", "all", "--output",
          c.work / "ft_prompts", "--json", log="skill_to_instruction")
    return {"lakes": lakes, "skills": split_skills(c.work / "ft_prompts", c.work)}


def heldout_skill(name: str) -> bool:
    """A stable 1-in-5 split of the skills by name: the held-out ones never reach training."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0


def split_skills(ft_prompts: Path, work: Path) -> dict:
    parts = {"train": [], "heldout": []}
    for f in sorted(ft_prompts.glob("*.jsonl")):
        parts["heldout" if heldout_skill(f.stem) else "train"].append(f)
    out = {}
    for part, files in parts.items():
        path = work / f"instruction_{part}.jsonl"
        path.write_text("".join(f.read_text() for f in files))  # the guide's `cat ft_prompts/*.jsonl > ...`
        out[part] = {"file": path, "skills": [f.stem for f in files]}
    return out


# ----------------------------------------------------------------------------------------------- held-out measures
class Scorer:
    """Held-out loss and answers of saved models, with the trainers' own encoding, loss and generation."""

    def __init__(self, model: str, threads: int):
        import torch

        from trainers.runtime.device import set_threads
        from trainers.modeling.models import load_tokenizer, resolve_model

        set_threads(threads)  # it runs after every command has finished: the cores are its own
        self.torch = torch
        self.base = resolve_model(model)
        self.tok = load_tokenizer(self.base)

    def load(self, run: str | None):
        from trainers.modeling.models import load_model

        return load_model(self.base, adapter=run, device=self.torch.device("cpu")).eval()

    def loss(self, model, convs: list[dict]) -> float:
        """Token-weighted mean cross-entropy on the assistant tokens (what training minimises)."""
        from trainers.modeling.forward import IGNORE, causal_lm_loss
        from trainers.modeling.batches import encode_conversation

        total, n = 0.0, 0
        with self.torch.no_grad():
            for conv in convs:
                ids, labels = encode_conversation(self.tok, conv, 1024)
                k = sum(1 for x in labels[1:] if x != IGNORE)
                if not k:
                    continue
                loss = causal_lm_loss(model, self.torch.tensor([labels]), input_ids=self.torch.tensor([ids]))
                total, n = total + loss.item() * k, n + k
        return total / n

    def answers(self, model, prompts: list[list[dict]], max_new_tokens: int = 96) -> list[str]:
        from trainers.generation.generate import Sampling, generate

        out = []
        for i in range(0, len(prompts), 16):
            ids = [self.tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
                   ["input_ids"][-768:] for p in prompts[i:i + 16]]
            out += [self.tok.decode(g.token_ids, skip_special_tokens=True) for g in
                    generate(model, self.tok, ids, Sampling(max_new_tokens=max_new_tokens))]
        return out


def heldout_chats(lake: Path, env: str, work: Path) -> list[dict]:
    from trainers.sft.data import conversations, load_rows

    shutil.rmtree(work, ignore_errors=True)  # a resumed run exports again
    rows, _, src = load_rows("sft", str(lake), work)
    convs, _ = conversations([r for r in rows if r.get("env") == env], src, split="all")
    return convs


def read_pairs(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


CODE = re.compile(r"`([^`\n]+)`|```[^\n]*\n(.*?)```", re.S)
TERM = re.compile(r"[A-Za-z][\w./-]{3,}")


def step_terms(answer: str, prompt: str) -> set[str]:
    """The terms that name a skill's steps: words of its code (commands, flags, files) absent from the question;
    for a skill without code, its long words absent from the question."""
    asked = {w.lower() for w in TERM.findall(prompt)}
    code = " ".join(a or b for a, b in CODE.findall(answer))
    terms = {w.lower() for w in TERM.findall(code)} - asked
    return terms or {w.lower() for w in TERM.findall(answer) if len(w) >= 7} - asked


def names_steps(reply: str, terms: set[str]) -> float:
    """Share of the skill's step terms the reply contains."""
    low = reply.lower()
    return sum(t in low for t in terms) / len(terms) if terms else 0.0


def goal_pairs(pairs: list[dict], limit: int) -> list[dict]:
    """One question per skill: its goal pair ('What procedure should I follow? Give the exact steps.')."""
    seen, out = set(), []
    for p in pairs:
        if p.get("kind") == "goal" and p["skill"] not in seen:
            seen.add(p["skill"])
            out.append(p)
    return out[:limit]


def score_all(records: list[dict], setup_out: dict, model: str, work: Path, size: Size) -> dict:
    """Adds the held-out loss (strategies 1, 3, 4) and strategy 4's step naming to the records in place; returns
    the base model's values (step 0)."""
    sc = Scorer(model, size.jobs)
    lakes, skills = setup_out["lakes"], setup_out["skills"]
    chats = {BASH: heldout_chats(lakes["heldout"], BASH, work / "heldout_bash"),
             GIT: heldout_chats(lakes["heldout"], GIT, work / "heldout_git")}
    pairs = {part: read_pairs(skills[part]["file"]) for part in ("train", "heldout")}
    questions = {part: goal_pairs(pairs[part], size.score_questions) for part in pairs}
    if size.score_pairs:
        pairs = {part: random.Random(0).sample(ps, min(len(ps), size.score_pairs)) for part, ps in pairs.items()}
    cache: dict[tuple, dict] = {}

    def measure(run: str | None, env: str | None) -> dict:
        key = (run, env)
        if key in cache:
            return cache[key]
        m = sc.load(run)
        if env:
            out = {"heldout_loss": sc.loss(m, chats[env])}
        else:
            out = {"heldout_loss": sc.loss(m, pairs["heldout"]), "train_skills_loss": sc.loss(m, pairs["train"])}
            for part, qs in questions.items():
                replies = sc.answers(m, [q["messages"][:-1] for q in qs])
                shares = [names_steps(r, step_terms(q["messages"][-1]["content"], q["messages"][0]["content"]))
                          for r, q in zip(replies, qs)]
                out[f"{part}_step_terms"] = statistics.fmean(shares)
                out[f"{part}_names_steps"] = sum(s >= 0.25 for s in shares) / len(shares)
                out[f"{part}_example"] = {"question": qs[0]["messages"][0]["content"][:200], "reply": replies[0][:300]}
        cache[key] = out
        return out

    env_of = {"sft": BASH, "transfer": GIT, "instruct": None}
    for r in records:
        if r["strategy"] in env_of:
            r.update(measure(r["run"], env_of[r["strategy"]]))
    return {"bash": measure(None, BASH), "git": measure(None, GIT), "skills": measure(None, None)}


# ----------------------------------------------------------------------------------------------- the whole run
def run_all(size: Size, model: str, work: Path, resume: bool = False) -> dict:
    c = Commands(work, model, resume)
    t0 = time.time()
    s = setup(c, size)
    lakes = s["lakes"]
    seeds = list(range(size.seeds))
    base = pool(size.jobs, [lambda: c.evaluate(BASH, size.eval_limit, None, log="base-eval-bash"),
                            lambda: c.evaluate(GIT, size.eval_limit, None, log="base-eval-git"),
                            *([lambda: c.evaluate(BASH, size.eval_limit, None, log="base-fam-bash",
                                                  split="test_families")] if size.families else [])])
    # phase 1: what needs only the base model
    first = pool(size.jobs, [*(lambda sd=sd: strategy_sft(c, size, lakes["bash"], sd) for sd in seeds),
                             *(lambda sd=sd: strategy_no_transfer(c, size, lakes["git"], sd) for sd in seeds),
                             *(lambda sd=sd: strategy_instruct(c, size, lakes["bash"], sd, s["skills"]["train"]["file"])
                               for sd in seeds)])
    records = [r for rs in first for r in rs]
    sft_final = {r["seed"]: Path(r["run"]) for r in records
                 if r["strategy"] == "sft" and r["step"] == size.sft_steps[-1]}
    # phase 2: what starts from each seed's SFT model
    second = pool(size.jobs, [*(lambda sd=sd, rs=rs: strategy_online(c, size, lakes["bash"], sd, sft_final[sd], rs)
                                for sd in seeds for rs in (1.0, 2.5)),
                              *(lambda sd=sd: strategy_transfer(c, size, lakes["git"], sd, sft_final[sd], size.freeze)
                                for sd in seeds)])
    records += [r for rs in second for r in rs]
    train_s = time.time() - t0
    base_scores = score_all(records, s, model, work, size)
    return {"records": records, "base": {"bash": {**base[0], **(base[2] if size.families else {}),
                                                  **base_scores["bash"]},
                                         "git": {**base[1], **base_scores["git"]}, "skills": base_scores["skills"]},
            "skills": {part: len(v["skills"]) for part, v in s["skills"].items()},
            "train_eval_s": round(train_s), **time_spent(t0, c.logs)}


# ----------------------------------------------------------------------------------------------- table and plots
def table(result: dict, size: Size) -> list[str]:
    recs, base = result["records"], result["base"]
    last = {"sft": size.sft_steps[-1], "online": size.online_steps, "transfer": size.transfer_steps[-1],
            "instruct": size.instruct_steps[-1]}
    rows = ["| strategy | arm | measure (held-out) | before | after | after - before |", "|---|---|---|---|---|---|"]

    def row(strategy, arm, measure, before: list[float], after: list[float]):
        diff = [a - b for a, b in zip(after, before)] if len(before) == len(after) else []
        rows.append(f"| {strategy} | {arm} | {measure} | {fmt_ci(before)} | {fmt_ci(after)} | "
                    f"{fmt_ci(diff) if diff else ''} |")

    s1 = sorted(by(recs, strategy="sft", step=last["sft"]), key=lambda r: r["seed"])
    n1 = len(s1)
    row("1 SFT from lake trajectories", f"{last['sft']} steps", "bash test success",
        [base["bash"]["success"]] * n1, [r["success"] for r in s1])
    row("", "", "bash test valid tool calls", [base["bash"]["valid"]] * n1, [r["valid"] for r in s1])
    row("", "", "bash test valid first-turn tool calls", [base["bash"]["first_valid"]] * n1,
        [r["first_valid"] for r in s1])
    if size.families:
        row("", "", "bash held-out families success", [base["bash"]["fam_success"]] * n1,
            [r["fam_success"] for r in s1])
        row("", "", "bash held-out families valid first-turn tool calls", [base["bash"]["fam_first_valid"]] * n1,
            [r["fam_first_valid"] for r in s1])
        row("", "", "replies cut by the repetition stop (test + families)",
            [base["bash"]["repetition_stops"] + base["bash"]["fam_repetition_stops"]] * n1,
            [r["repetition_stops"] + r["fam_repetition_stops"] for r in s1])
    row("", "", "loss on bash test expert chats", [base["bash"]["heldout_loss"]] * n1, [r["heldout_loss"] for r in s1])
    for scale in (1.0, 2.5):
        arm = f"reward_scale {scale}"
        start = sorted(by(recs, arm=arm, step=0), key=lambda r: r["seed"])
        end = sorted(by(recs, arm=arm, step=last["online"]), key=lambda r: r["seed"])
        row("2 online RL from the SFT model" if scale == 1.0 else "", f"{arm}, {last['online']} steps",
            "bash test success", [r["success"] for r in start], [r["success"] for r in end])
        row("", "", "bash test mean reward", [r["reward"] for r in start], [r["reward"] for r in end])
        if all(r.get("first_valid") is not None for r in start + end):
            row("", "", "bash test valid first-turn tool calls", [r["first_valid"] for r in start],
                [r["first_valid"] for r in end])
    def versus(measure: str, key: str, a: list[dict], b: list[dict]):
        """Arm a minus arm b at the end, paired by seed."""
        rows.append(f"| | | {measure} | | | {fmt_ci([x[key] - y[key] for x, y in zip(a, b)])} |")

    ends = {scale: sorted(by(recs, arm=f"reward_scale {scale}", step=last["online"]), key=lambda r: r["seed"])
            for scale in (1.0, 2.5)}
    versus("success: reward_scale 2.5 minus 1.0, same seeds", "success", ends[2.5], ends[1.0])
    arms = [transfer_arm(size.freeze), NO_TRANSFER]
    for arm in arms:  # before: the arm's own start (the bash SFT model for transfer, the tiny base without)
        end = sorted(by(recs, arm=arm, step=last["transfer"]), key=lambda r: r["seed"])
        start = sorted(by(recs, arm=arm, step=0), key=lambda r: r["seed"]) or [base["git"]] * len(end)
        row("3 transfer bash -> git" if arm == arms[0] else "", f"{arm}, {last['transfer']} steps", "git test success",
            [r["success"] for r in start], [r["success"] for r in end])
        row("", "", "loss on git test expert chats", [r["heldout_loss"] for r in start],
            [r["heldout_loss"] for r in end])
        if all("first_valid" in r for r in start + end):
            row("", "", "git test valid first-turn tool calls", [r["first_valid"] for r in start],
                [r["first_valid"] for r in end])
        reach = [first_step_at(recs, arm, r["seed"], SUCCESS_LEVEL) for r in end]
        rows.append(f"| | | steps to git test success >= {SUCCESS_LEVEL} | | "
                    f"{', '.join('not reached' if x is None else str(x) for x in reach)} (per seed) | |")
    ends = [sorted(by(recs, arm=arm, step=last["transfer"]), key=lambda r: r["seed"]) for arm in arms]
    versus("git test success: transfer minus no transfer, same seeds", "success", *ends)
    versus("git held-out loss: transfer minus no transfer, same seeds", "heldout_loss", *ends)
    s4 = sorted(by(recs, strategy="instruct", step=last["instruct"]), key=lambda r: r["seed"])
    n4, b4 = len(s4), base["skills"]
    row("4 instruction tuning from skills", f"{last['instruct']} steps",
        f"loss on {result['skills']['heldout']} held-out skills' pairs"
        + (f" (a sample of {size.score_pairs})" if size.score_pairs else ""), [b4["heldout_loss"]] * n4,
        [r["heldout_loss"] for r in s4])
    row("", "", "loss on the train skills' pairs", [b4["train_skills_loss"]] * n4,
        [r["train_skills_loss"] for r in s4])
    row("", "", "held-out skills: answer names >= 25% of the skill's step terms", [b4["heldout_names_steps"]] * n4,
        [r["heldout_names_steps"] for r in s4])
    row("", "", "train skills (seen): the same", [b4["train_names_steps"]] * n4, [r["train_names_steps"] for r in s4])
    return rows


def plot(result: dict, size: Size, out: Path) -> list[Path]:
    """One PNG per strategy: held-out success against steps (each arm's mean over seeds, the 95% band), beside
    the held-out loss where it is measured (it moves long before success does on a small model)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    recs, base = result["records"], result["base"]
    git_arms = sorted({r["arm"] for r in by(recs, strategy="transfer")})
    specs = [
        ("sft", "1. SFT from lake trajectories (bash_exec_env test)", [("success", {"sft": base["bash"]["success"]}),
                                                                      ("heldout_loss", {"sft": base["bash"]["heldout_loss"]})]),
        ("online", "2. online RL from the SFT model (bash_exec_env test)", [("success", {}), ("reward", {})]),
        ("transfer", "3. transfer bash -> git vs the same base without transfer (git_repo_env test)",
         [("success", {a: base["git"]["success"] for a in git_arms if not by(recs, arm=a, step=0)}),
          ("heldout_loss", {a: base["git"]["heldout_loss"] for a in git_arms if not by(recs, arm=a, step=0)})]),
        ("instruct", "4. instruction tuning from skills (held-out skills)",
         [("heldout_loss", {"skills instruction tuning": base["skills"]["heldout_loss"]}),
          ("heldout_names_steps", {"skills instruction tuning": base["skills"]["heldout_names_steps"]})]),
    ]
    labels = {"success": "held-out (test) success rate", "heldout_loss": "held-out loss", "reward": "test mean reward",
              "heldout_names_steps": "held-out skills whose answer\nnames >= 25% of their step terms"}
    paths = []
    for strategy, title, panels in specs:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.9))
        for ax, (key, step0) in zip(axes, panels):
            for i, arm in enumerate(sorted({r["arm"] for r in by(recs, strategy=strategy)})):
                rs = by(recs, strategy=strategy, arm=arm)
                steps = sorted({r["step"] for r in rs} | ({0} if arm in step0 else set()))
                mean, lo, hi = [], [], []
                for st in steps:
                    vals = [r[key] for r in rs if r["step"] == st] if st or arm not in step0 else [step0[arm]]
                    m, low, high = band(vals, rate=key in RATE_KEYS)
                    mean.append(m)
                    lo.append(low)
                    hi.append(high)
                line, = ax.plot(steps, mean, marker="os^"[i % 3], linestyle=["-", "--", ":"][i % 3], label=arm)
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
            ax.set_xlabel("training steps (each point: a run of that many steps)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(labels[key])
            if key != "heldout_loss":
                ax.set_ylim(bottom=0, top=max(0.05, ax.get_ylim()[1]))
            ax.legend(fontsize=8, loc="best")
        fig.suptitle(title, fontsize=10)
        fig.text(0.01, 0.01, f"mean of {size.seeds} seeds, band: 95% t-interval", fontsize=7, color="grey")
        fig.tight_layout()
        path = out / f"learning_{strategy}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(result: dict, size: Size, args, out: Path, loads: tuple) -> Path:
    flag = "" if args.size == "full" else " --quick" if args.size == "quick" else f" --size {args.size}"
    lines = [f"# Learning: the guide's four strategies ({args.size} run, model {args.model})",
             "", f"Generated by `python bench/learning.py{flag}"
             f"{'' if args.model == 'tiny' else ' --model ' + args.model}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime((out / 'learning.json').stat().st_mtime))}; {machine()}; "
             f"1-minute load average "
             f"{loads[0]:.2f} at the start, {loads[1]:.2f} at the end; {result['total_s'] / 60:.1f} min in all "
             f"({size.jobs} commands side by side, one torch thread each)" + (
                 f", resumed: that is the last invocation, the finished commands' own times sum to "
                 f"{result['commands_s'] / 60:.0f} min." if args.resume else
                 f"; {result['cpu_s'] / 60:.0f} CPU-min, so at least {result['cpu_s'] / 60 / (os.cpu_count() or 1):.0f} "
                 f"min on {os.cpu_count()} idle cores."), "",
             f"Seeds {size.seeds}; figures are means with a 95% t-interval over seeds (± half-width). Held-out = "
             f"the test split's first {size.eval_limit} tasks (greedy), {size.heldout} test expert chats per "
             f"environment for the losses, {result['skills']['heldout']} held-out skills (of "
             f"{result['skills']['heldout'] + result['skills']['train']}) for strategy 4. Sizes: {asdict(size)}.", ""]
    if args.size == "short":
        lines += ["**--size short trains a dozen steps per run and evaluates 20 held-out tasks: it shows which way "
                  "each strategy moves the pretrained model on a CPU, not where it ends** (the full size is GPU "
                  "work).", ""]
    if args.size == "quick":
        lines += ["**--quick checks that every command runs; its step counts are far too few to learn anything on "
                  "held-out tasks** (the tiny model trained from scratch needs 1,500+ SFT steps before a held-out "
                  "task succeeds: trainers/README.md). Only the held-out losses move.", ""]
    lines += table(result, size)
    lines += ["", "Curves (held-out success against steps, seeds' band; held-out loss beside it): " +
              ", ".join(f"[{p.name}]({p.name})" for p in sorted(out.glob("learning_*.png"))), "",
              "Raw records (every run, seed and step): learning.json."]
    path = out / "LEARNING.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="full",
                    help="full (the tiny model's 60-minute run), quick (checks that everything runs, minutes), "
                         "short (the pretrained model on CPU: 2 seeds, a dozen steps, 20 tasks) or cpu (the "
                         "pretrained model at a size that can show effects on 2 CPU cores: 2 seeds, 48 SFT and 16 "
                         "online steps, 100 test and 100 held-out-family tasks, ~2 h)")
    ap.add_argument("--quick", action="store_true", help="the same as --size quick")
    ap.add_argument("--model", default="tiny", help="tiny | smollm2 | a model folder (LoRA for a pretrained one)")
    ap.add_argument("--seeds", type=int, help="override the size's seed count")
    ap.add_argument("--jobs", type=int, help="commands side by side (default 2)")
    ap.add_argument("--out", type=Path, help="where the table, records and PNGs go (default bench/learning[/quick])")
    work_options(ap)
    args = ap.parse_args()
    if args.quick:
        args.size = "quick"
    size = SIZES[args.size]
    if args.model != "tiny":
        size = replace(size, **PRETRAINED)
    size = replace(size, **{k: v for k, v in (("seeds", args.seeds), ("jobs", args.jobs)) if v})
    out = args.out or ROOT / "bench" / "learning" / ("quick" if args.size == "quick" else
                                                    ("" if args.model == "tiny" else args.model))
    out.mkdir(parents=True, exist_ok=True)
    work = work_folder(args, ap, "lachesis-learning-")
    load0 = os.getloadavg()[0]
    print(f"learning: {args.size} run, model {args.model}, {size.seeds} seeds, work {work}, "
          f"load {load0:.2f}", flush=True)
    result = run_in_work(args, work, lambda: run_all(size, args.model, work, resume=args.resume))
    load1 = os.getloadavg()[0]
    (out / "learning.json").write_text(json.dumps({"size": asdict(size), "model": args.model, "machine": machine(),
                                                    "load": [load0, load1], **result}, indent=1))
    plot(result, size, out)
    report = write_report(result, size, args, out, (load0, load1))
    print(report.read_text())


if __name__ == "__main__":
    main()
