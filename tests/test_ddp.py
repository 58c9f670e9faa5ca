"""rl_finetune_supervised under torchrun: 2 CPU processes (DDP over gloo) at --batch-size 4 train as 1 process
at --batch-size 8 (both with --grad-accum 2: a global batch of 16 rows per step); only the main process writes the run folder, the model and the `runs` event; the shipped
accelerate configs (configs/accelerate/*.yaml) are what accelerate's loader and launcher read.

The tolerance: both runs compute the same gradient (every process draws the same global batches and trains its
half; a step's loss is normalised by the labelled tokens of the whole global batch), only summed in a different
float32 order (one sum over 8 rows vs two sums of 4 rows added by gloo). Measured on this data (2026-12-03, load
13): the unrounded first and final losses are equal, the logged per-step losses (5 decimals) within 1e-5, the
weights within 1.04e-5. LOSS_TOL = 1e-4 is 10x the log's rounding, and below the smallest real bug measured
here: each process averaging its own half (mean of two means instead of the mean over all labelled tokens) moves
the first losses by 4.5e-4 to 1.7e-3, and a run on the wrong global batch (one process at --batch-size 4) by 4e-3
to 2.6e-2. WEIGHT_TOL = 5e-4: Adam divides by the root of the squared gradients, so for a weight whose gradient is
near zero a rounding-level difference can move its update by up to the learning rate (1e-3); the trained weights
are 3.8e-3 away from the initial ones, so a saved untrained (or other process's stale) model still fails.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

LOSS_TOL = 1e-4
WEIGHT_TOL = 5e-4
STEPS = 6
CONFIGS = Path(th.REPO) / "configs" / "accelerate"


def _chats(n: int = 24, seed: int = 5) -> list[dict]:
    """Tool chats whose last reply has 1-60 extra words: the processes' halves of a batch differ in labelled
    tokens, so a loss normalised per process instead of over the global batch shows (see the docstring)."""
    rows = th.tool_chats(n, seed=seed)
    rng = random.Random(seed)
    for r in rows:
        words = " ".join(rng.choice(["the", "file", "now", "holds", "lines"]) for _ in range(rng.randint(1, 60)))
        r["messages"][-1]["content"] = f"Done. {words}"
    return rows


def _torchrun(tmp_path: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node 2 -m lachesis.train_cli ARGS` (a free port: other runs may be on
    the default one), one torch thread per process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LACHESIS_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(th.REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "lachesis.train_cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)


def _log(run: Path) -> tuple[list[dict], dict]:
    lines = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    return [r for r in lines if "step" in r and not r.get("summary")], lines[-1]


def test_two_processes_train_as_one_with_the_same_global_batch(tiny_dir, tmp_path):  # noqa: F811
    from safetensors.torch import load_file

    from lake import Lake
    from trainers.sft.config import SFTConfig
    from trainers.sft.sft import run_sft

    data = th.write_jsonl(tmp_path / "chats.jsonl", _chats())
    Lake.init(tmp_path / "lake")
    # 2 micro-batches per step: the first one's gradients wait (no_sync) and join the second one's all-reduce
    common = ["--model", str(tiny_dir), "--data", str(data), "--max-steps", str(STEPS), "--log-every", "1",
              "--lr", "1e-3", "--warmup-steps", "0", "--grad-accum", "2", "--no-plot", "--json"]
    ddp = _torchrun(tmp_path, *common, "--batch-size", "4", "--output", str(tmp_path / "ddp"),
                    "--lake", str(tmp_path / "lake"))
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    printed = json.loads(ddp.stdout)  # one summary on stdout: the main process's (the other prints nothing)
    single = run_sft(SFTConfig(model=str(tiny_dir), data=str(data), max_steps=STEPS, log_every=1, learning_rate=1e-3,
                               warmup_steps=0, grad_accum=2, plot=False, batch_size=8, output=str(tmp_path / "single"),
                               record_in_lake=False, progress=False))

    (d_steps, d_sum), (s_steps, s_sum) = _log(tmp_path / "ddp"), _log(tmp_path / "single")
    assert (d_sum["processes"], d_sum["distributed"], d_sum["global_batch"]) == (2, "MULTI_CPU", 16)
    assert (s_sum["processes"], s_sum["distributed"], s_sum["global_batch"]) == (1, "NO", 16)
    assert [r["step"] for r in d_steps] == [r["step"] for r in s_steps] == list(range(1, STEPS + 1))
    # the same rows in every step: token counts of the global batch agree exactly
    assert [(r["tokens"], r["label_tokens"], r["lr"]) for r in d_steps] == \
           [(r["tokens"], r["label_tokens"], r["lr"]) for r in s_steps]
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(d_steps, s_steps)]
    assert max(diffs) <= LOSS_TOL, (diffs, [r["loss"] for r in d_steps], [r["loss"] for r in s_steps])
    assert abs(d_sum["final_loss"] - s_sum["final_loss"]) <= LOSS_TOL
    assert s_steps[-1]["loss"] < s_steps[0]["loss"] - 0.3  # it trained: agreement is not two frozen models
    # the saved model is the trained one, and the same
    wd = load_file(tmp_path / "ddp" / "model" / "model.safetensors")
    ws = load_file(tmp_path / "single" / "model" / "model.safetensors")
    assert wd.keys() == ws.keys()
    assert max(float((wd[k] - ws[k]).abs().max()) for k in wd) <= WEIGHT_TOL
    # only the main process wrote: one run folder (nothing under the default runs/), one runs event
    assert json.loads((tmp_path / "ddp" / "summary.json").read_text())["run_id"] == printed["run_id"]
    assert printed["processes"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.jsonl", "ddp", "lake", "single"]
    events = Lake(str(tmp_path / "lake")).snapshot().arrow("SELECT run_id, metadata FROM runs").to_pylist()
    assert [e["run_id"] for e in events] == [printed["run_id"]]
    assert single["run_id"] != printed["run_id"]


@pytest.mark.slow
def test_an_input_error_stops_every_process_with_one_line(tmp_path):
    """A missing dataset is found by the main process; the other one gets the same one-line error instead of
    waiting for a result forever (a hang until the gloo timeout, 30 minutes, is what a naive split gives)."""
    r = _torchrun(tmp_path, "--model", "tiny", "--data", str(tmp_path / "nope.jsonl"), "--no-lake", timeout=120)
    assert r.returncode != 0
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 2 and len(set(errors)) == 1 and "does not exist" in errors[0], r.stderr[-2000:]
    # torchrun reports the failed processes with a traceback of its own; none comes from our code
    assert not [x for x in r.stderr.splitlines() if x.strip().startswith("File ") and "/torch/" not in x
                and "<frozen" not in x], r.stderr[-2000:]
    assert not list((tmp_path / "runs").glob("*"))  # the half-made run folder is removed, as in one process


@pytest.mark.parametrize("name, kind", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero2", "DEEPSPEED"),
                                        ("zero3", "DEEPSPEED")])
def test_accelerate_configs_load_and_reach_the_launcher(name, kind):
    """Each shipped config parses with accelerate's own loader, and `accelerate launch` turns it into the
    launch arguments it means (FSDP2 / ZeRO stage) without launching: running them needs GPUs."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = CONFIGS / f"{name}.yaml"
    cfg = load_config_from_file(str(path))
    assert str(cfg.distributed_type).endswith(kind) and not cfg.use_cpu and cfg.mixed_precision == "bf16"
    args = launch_command_parser().parse_args(["--config_file", str(path), "-m", "lachesis.train_cli", "--data", "sft"])
    _validate_launch_command(args)
    assert args.module and args.training_script == "lachesis.train_cli"
    assert (args.use_fsdp, args.use_deepspeed) == (kind == "FSDP", kind == "DEEPSPEED")
    if kind == "FSDP":
        assert str(args.fsdp_version) == "2" and args.fsdp_state_dict_type == "FULL_STATE_DICT"
    if kind == "DEEPSPEED":
        assert int(args.zero_stage) == int(name[-1]) and float(args.gradient_clipping) == 1.0
    assert "accelerate launch --config_file configs/accelerate/" + name in path.read_text()
