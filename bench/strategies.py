"""The guide's four strategies as runs of the real console commands, and the sizes they run at: each function trains
one arm for one seed (a run per step count, each evaluated) and returns its records
({strategy, arm, seed, step, run, success, ...}).

learning.py runs all four and reports them; the arm benches run one strategy at other sizes (online_arms.py:
`online_curve`, transfer_arms.py: `strategy_sft`, `strategy_transfer`, `strategy_no_transfer`). Every run stops on a
fixed, seeded step count, never wall time, so a rerun on another machine trains the same models.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness import BASH, GIT, Commands

@dataclass(frozen=True)
class Size:
    seeds: int
    bash_expert: int        # train-split expert rollouts of bash_exec_env (strategies 1 and 2)
    git_expert: int         # ... of git_repo_env (strategy 3's target rows)
    heldout: int            # test-split expert chats per env for the held-out loss
    eval_limit: int         # test tasks per hermes_eval / online evaluation
    sft_steps: tuple        # strategy 1 curve points (the last one is the model strategies 2 and 3 start from)
    online_steps: int
    online_eval_every: int
    online_lr: float
    transfer_steps: tuple
    transfer_lr: float
    instruct_steps: tuple
    freeze: str             # strategy 3's frozen decoder layers (with the embeddings)
    jobs: int               # commands run side by side, one torch thread each
    sft_lr: float | None = None           # strategy 1's lr and batch (None: rl_finetune_supervised's defaults)
    sft_batch: int | None = None
    transfer_batch: int = 16              # strategy 3's batch, both arms
    online_micro_batch: int | None = None  # episodes per forward/backward in rl_train_online (memory: 2 SmolLM2
    # episodes of ~2,000 tokens took 22 GB, the attention weights of a padded batch kept for the backward pass)
    instruct_batch: int | None = None      # strategy 4's micro-batch and accumulation (None, 1: llm_finetune's
    instruct_accum: int = 1                # 16 at once; skill pairs run to 1,024 tokens: ~20 GB with SmolLM2, 13 at 4)
    score_pairs: int | None = None  # strategy 4's losses on at most this many pairs per part (a seeded sample)
    score_questions: int = 40       # ... and its answers to this many skills' questions per part
    families: bool = False          # strategy 1 also on the env's test_families split (families never trained)
    families_limit: int | None = None  # tasks per test_families evaluation (None: eval_limit)
    online_curriculum: bool = False  # rl_train_online --curriculum (tasks the policy solves sometimes)


SIZES = {
    "full": Size(seeds=3, bash_expert=1500, git_expert=800, heldout=100, eval_limit=100, sft_steps=(400, 1200),
                 online_steps=40, online_eval_every=20, online_lr=1e-4, transfer_steps=(100, 300), transfer_lr=1e-3,
                 instruct_steps=(100, 300), freeze="0", jobs=2),
    "quick": Size(seeds=2, bash_expert=120, git_expert=60, heldout=20, eval_limit=10, sft_steps=(20, 40),
                  online_steps=4, online_eval_every=2, online_lr=1e-4, transfer_steps=(10, 20), transfer_lr=1e-3,
                  instruct_steps=(10, 20), freeze="0", jobs=2),
    # the pretrained model on CPU: a LoRA step of SmolLM2-135M costs ~55-65 CPU-s per 8 conversations or rollouts
    # and a held-out task ~6-9 CPU-s (trainers/README.md), so the full size is GPU work; this one is ~2 h on 2 cores
    "short": Size(seeds=2, bash_expert=200, git_expert=200, heldout=20, eval_limit=20, sft_steps=(12,),
                  online_steps=4, online_eval_every=4, online_lr=1e-4, transfer_steps=(24,), transfer_lr=1e-3,
                  instruct_steps=(12,), freeze="0", jobs=2, sft_lr=1e-3, sft_batch=8, transfer_batch=4,
                  online_micro_batch=1, instruct_batch=2, instruct_accum=8, score_pairs=60, score_questions=20),
    # the pretrained model at a size that can show effects on 2 CPU cores (~2 h with the generation levers): all
    # 100 test tasks and the 100 held-out-family tasks, 48 SFT steps at the demo's measured lr (24 steps: 0.35 on
    # 20 tasks, 96 steps: 0.59 on 100), 16 online steps with the curriculum
    "cpu": Size(seeds=2, bash_expert=600, git_expert=300, heldout=20, eval_limit=100, sft_steps=(48,),
                online_steps=16, online_eval_every=16, online_lr=2e-4, transfer_steps=(24,), transfer_lr=1e-3,
                instruct_steps=(12,), freeze="0", jobs=2, sft_lr=2e-3, sft_batch=8, transfer_batch=4,
                online_micro_batch=1, instruct_batch=2, instruct_accum=8, score_pairs=60, score_questions=20,
                families=True, online_curriculum=True),
}


PRETRAINED = {"freeze": "0-8", "transfer_lr": 1e-3}  # SmolLM2 has 30 layers: the guide's 0-8


def supervised_curve(c: Commands, size: Size, lake: Path, seed: int, *, strategy: str, arm: str, env: str,
                     steps: tuple, tag: str, extra: tuple = (), families: bool = False) -> list[dict]:
    """rl_finetune_supervised on the lake's sft view for each step count, each run evaluated on env's test split
    (and its test_families split with `families`)."""
    recs = []
    for k in steps:
        run = c.work / tag / f"seed{seed}-steps{k}"
        c.run("rl_finetune_supervised", "--model", c.model, "--data", "sft", "--lake", lake, "--max-steps", k,
              *extra, "--seed", seed, "--output", run, "--no-plot", "--quiet", log=f"{tag}-seed{seed}-steps{k}")
        fam = c.evaluate(env, size.families_limit or size.eval_limit, run, log=f"{tag}-fam-seed{seed}-steps{k}",
                         split="test_families") if families else {}
        recs.append({"strategy": strategy, "arm": arm, "seed": seed, "step": k, "run": str(run),
                     **c.evaluate(env, size.eval_limit, run, log=f"{tag}-eval-seed{seed}-steps{k}"), **fam})
    return recs


def strategy_sft(c: Commands, size: Size, lake: Path, seed: int, env: str = BASH, extra: tuple = ()) -> list[dict]:
    """Strategy 1 on `env` (bash_exec_env unless told), `extra`: more rl_finetune_supervised options."""
    own = (*(("--learning-rate", size.sft_lr) if size.sft_lr else ()), *(("--batch-size", size.sft_batch) if size.sft_batch
                                                                else ()))
    return supervised_curve(c, size, lake, seed, strategy="sft", arm="sft", env=env, steps=size.sft_steps, tag="s1",
                            extra=(*own, *extra), families=size.families)


def online_curve(c: Commands, lake: Path, seed: int, init: Path, *, strategy: str, arm: str, run: Path, cfg: Path,
                 steps: int, eval_every: int, micro_batch: int | None, curriculum: bool, env: str = BASH) -> list[dict]:
    """rl_train_online on `env` from `init` with the project file `cfg`; its own test evaluations as records
    (online_records)."""
    c.run("rl_train_online", "--env", env, "--steps", steps, "--eval_interval", eval_every,
          "--model", c.model, "--init", init, "--config", cfg, "--seed", seed, "--lake", lake, "--output", run,
          *(("--micro-batch", micro_batch) if micro_batch else ()), *(("--curriculum",) if curriculum else ()),
          "--no-plot", "--quiet", log=f"{run.parent.name}-{run.name}")
    return online_records(run, strategy=strategy, arm=arm, seed=seed)


def online_records(run: Path, **keys) -> list[dict]:
    """A rl_train_online run's evaluations from its step log, each with `keys`; the last one also carries `signal`:
    each training step's fraction of groups with a reward difference, in order."""
    recs, signal = [], []
    for line in (run / "train_log.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("eval"):
            recs.append({**keys, "step": r["step"], "run": str(run), "success": r["success_rate"],
                         "reward": r["mean_reward"], "valid": r["valid_tool_call_rate"],
                         "first_valid": r.get("first_call_valid_rate")})
        elif "signal_groups" in r:
            signal.append(r["signal_groups"])
    if recs:
        recs[-1]["signal"] = signal
    return recs


def strategy_online(c: Commands, size: Size, lake: Path, seed: int, init: Path, scale: float) -> list[dict]:
    cfg = c.project_file(f"online-rs{scale}-seed{seed}", reward_scale=scale, learning_rate=size.online_lr,
                         eval_episodes=size.eval_limit)
    return online_curve(c, lake, seed, init, strategy="online", arm=f"reward_scale {scale}",
                        run=c.work / "s2" / f"rs{scale}-seed{seed}", cfg=cfg, steps=size.online_steps,
                        eval_every=size.online_eval_every, micro_batch=size.online_micro_batch,
                        curriculum=size.online_curriculum)


NO_TRANSFER = "same base, no transfer"  # strategy_no_transfer's arm


def transfer_arm(freeze: str, adapter: str = "continue") -> str:
    """strategy_transfer's arm name for the frozen layers `freeze` (rl_transfer_init's --freeze_layers; empty: the
    embeddings only) and its --adapter (fresh: a new adapter over the merged source)."""
    fresh = ", a fresh adapter over the merged source" if adapter == "fresh" else ""
    return (f"transfer{fresh}, layers {freeze} frozen" if freeze else f"transfer{fresh}, embeddings only frozen")


def strategy_transfer(c: Commands, size: Size, lake: Path, seed: int, source: Path, freeze: str,
                      source_eval: dict | None = None, source_env: str = BASH, target_env: str = GIT,
                      extra: tuple = (), adapter: str = "continue") -> list[dict]:
    """`source_eval`: the source's figures on the target when already measured (greedy: the same for every seed);
    `extra`: more rl_train_transfer options (as --micro_batch); `adapter`: rl_transfer_init's --adapter."""
    cfg = c.project_file(f"transfer-seed{seed}", learning_rate=size.transfer_lr, seed=seed)
    spec = c.work / "s3" / f"spec-seed{seed}.json"
    c.run("rl_transfer_init", "--source_env", source_env, "--target_env", target_env, "--freeze_layers", freeze,
          "--from", source, *(("--adapter", adapter) if adapter != "continue" else ()),
          "--config", cfg, "--lake", lake, "--output", spec, "--quiet", log=f"s3-init-seed{seed}")
    arm = transfer_arm(freeze, adapter)
    # step 0 of the transfer arm is the source model itself (the bash SFT run), on the git tasks
    recs = [{"strategy": "transfer", "arm": arm, "seed": seed, "step": 0, "run": str(source),
             **(source_eval or c.evaluate(target_env, size.eval_limit, source, log=f"s3-eval-source-seed{seed}"))}]
    for k in size.transfer_steps:
        run = c.work / "s3" / f"transfer-seed{seed}-steps{k}"
        c.run("rl_train_transfer", "--method", "sft", "--spec", spec, "--data", "sft", "--max_steps", k,
              "--batch_size", size.transfer_batch, "--config", cfg, "--seed", seed, "--lake", lake, "--output", run, "--no-plot",
              "--quiet", *extra, log=f"s3-transfer-seed{seed}-steps{k}")
        recs.append({"strategy": "transfer", "arm": arm, "seed": seed, "step": k,
                     "run": str(run), **c.evaluate(target_env, size.eval_limit, run, log=f"s3-eval-t-seed{seed}-{k}")})
    return recs


def strategy_no_transfer(c: Commands, size: Size, lake: Path, seed: int, env: str = GIT,
                         micro_batch: int | None = None) -> list[dict]:
    """The same base trained on the same target rows (git's by default) with the transfer run's lr, batch and
    steps (the batch in passes of `micro_batch` conversations, as the transfer arm's --micro_batch)."""
    micro = min(micro_batch or size.transfer_batch, size.transfer_batch)
    return supervised_curve(c, size, lake, seed, strategy="transfer", arm=NO_TRANSFER, env=env,
                            steps=size.transfer_steps, tag="s3-base",
                            extra=("--learning-rate", size.transfer_lr, "--batch-size", micro,
                                   "--grad-accum", size.transfer_batch // micro))


def strategy_instruct(c: Commands, size: Size, lake: Path, seed: int, data: Path) -> list[dict]:
    recs = []
    for k in size.instruct_steps:
        run = c.work / "s4" / f"seed{seed}-steps{k}"
        c.run("llm_finetune", "--model", c.model, "--data", data, "--method", "sft", "--max-steps", k, "--seed", seed,
              *(("--batch-size", size.instruct_batch, "--grad-accum", size.instruct_accum) if size.instruct_batch
                else ()), "--split", "all", "--lake", lake, "--output", run, "--no-plot", "--quiet", log=f"s4-seed{seed}-steps{k}")
        recs.append({"strategy": "instruct", "arm": "skills instruction tuning", "seed": seed, "step": k,
                     "run": str(run)})
    return recs
