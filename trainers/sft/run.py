"""The start of a training command's run folder, once its data and model are known: the settled config, the step
plan and its warning, config.json and manifest.json (SFT and DPO). Apart from trainers/sft/config.py so that the
config, and the training loop that reads it (trainers/sft/loop.py), import no lake (bench/gpu_check.py).
"""
from __future__ import annotations

from trainers.runtime.model_folder import trained_from_scratch
from trainers.runtime.runfolder import RunFolder
from trainers.sft.config import StepPlan, TrainConfig


def start_run(run: RunFolder, config: TrainConfig, model_path: str, examples: int, manifest: dict, console=None,
              processes: int = 1) -> tuple[TrainConfig, StepPlan]:
    """Once data and model are known: settle the model-dependent defaults (full fine-tuning from scratch, LoRA
    for pretrained; the lr), plan the steps (of `processes` training together), warn when they are too few to
    learn, write config.json and manifest.json into the run folder. Returns (the settled config, the step plan)."""
    scratch = trained_from_scratch(model_path)
    config = config.settle(scratch)
    plan = config.plan(examples, processes)
    warning = plan.warning(scratch)
    if warning:
        run.warn(warning, console)
    run.write_manifest(manifest)
    run.write_config(config, model_path)
    run.start_reporting(config.report_to)
    return config, plan
