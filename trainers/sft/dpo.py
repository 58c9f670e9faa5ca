"""Preference tuning with TRL's DPOTrainer (llm_finetune --method dpo) on prompt/chosen/rejected rows.

Rows in TRL's preference format: `prompt` (text or a list of messages) with `chosen` / `rejected` (text or
assistant message lists), as the views wing's `dpo` view writes them. Messages reach our chat template through
the message model (transcript/messages.py `template_messages`: tool-call arguments as objects). The same
InstructConfig, step plan (seeded step count, warm-up bounded by the run) and RunFolder as SFT; CPU-safe trl
arguments from config.cpu_defaults().
"""
from __future__ import annotations

import shutil
import time

from trainers.modeling.chat import normalize_tools
from trainers.modeling.models import load_model, load_tokenizer, model_label, resolve_model
from trainers.runtime.device import cpu_defaults, set_threads, setup_env
from trainers.runtime.device import device as pick_device
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.plots import loss_points
from trainers.runtime.progress import Progress
from trainers.runtime.runfolder import RunFolder
from trainers.sft.config import InstructConfig
from trainers.sft.data import load_rows
from trainers.sft.run import start_run
from transcript.messages import template_messages
from transcript.toolcalls import loads_bounded


def _side(v, name: str, i: int):
    if isinstance(v, str):
        try:
            parsed = loads_bounded(v)  # a row nested past the bound is kept as text, never a RecursionError
            if isinstance(parsed, list):
                v = parsed
        except ValueError:
            return v
    if isinstance(v, list):
        try:
            return template_messages(v)
        except (ValueError, TypeError) as exc:
            raise TrainerInputError(f"preference row {i}: bad `{name}` messages ({exc})") from None
    if v is None:
        raise TrainerInputError(f"preference row {i} has no `{name}`: each row needs prompt, chosen and rejected")
    return str(v)


def preference_rows(rows: list[dict], source: str, split: str | None) -> list[dict]:
    if not rows:
        raise TrainerInputError(f"dataset {source} is empty (0 rows): export the dpo view with `lake export dpo`")
    if not any("chosen" in r and "rejected" in r for r in rows):
        cols = sorted({k for r in rows[:50] for k in r})
        raise TrainerInputError(f"dataset {source} has no `chosen`/`rejected` columns (columns: {', '.join(cols[:12])}): "
                                "DPO needs prompt/chosen/rejected rows (the dpo view); use --method sft for chats")
    out = []
    for i, r in enumerate(rows):
        if split not in (None, "all") and r.get("split") not in (None, split):
            continue
        row = {"prompt": _side(r.get("prompt"), "prompt", i), "chosen": _side(r.get("chosen"), "chosen", i),
               "rejected": _side(r.get("rejected"), "rejected", i)}
        kinds = {type(row[k]) for k in ("prompt", "chosen", "rejected")}
        if len(kinds) > 1:
            raise TrainerInputError(f"preference row {i}: prompt/chosen/rejected mix text and message lists; use one form")
        tools = normalize_tools(r.get("tools"))
        if tools:
            row["tools"] = tools
        out.append(row)
    if not out:
        raise TrainerInputError(f"dataset {source} has no rows of split {split!r}: pass --split all")
    return out


def run_dpo(s: InstructConfig, console=None) -> dict:
    """Load preference rows + model, train with trl's DPOTrainer, write the run folder and its `runs` event."""
    setup_env()
    dev = pick_device(s.device)  # first: --device cuda without CUDA is the one-line error before any work
    run = RunFolder.create(s, "dpo", "trl.DPOTrainer")
    with run.setting_up():
        rows, manifest, source = load_rows(s.data, s.lake_root, run.path)
        prefs = preference_rows(rows, source, s.split)
        model_path = resolve_model(s.model)
        tok = load_tokenizer(model_path, s.chat_template)
    s = s.settle_length(model_path)
    s, plan = start_run(run, s, model_path, len(prefs), {**manifest, "filter": {"split": s.split}, "rows_used": len(prefs)},
                        console)
    set_threads(s.threads)

    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import DPOConfig, DPOTrainer

    from trainers.sft.loop import lora_config

    t0 = time.perf_counter()
    prog = Progress(console if s.progress else None, "dpo", plan.total)

    class Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                run.log({"step": state.global_step, "elapsed_s": round(time.perf_counter() - t0, 3),
                         **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})
                prog.update(state.global_step, info=f"loss {logs['loss']:.3f}")

        def on_step_end(self, args, state, control, **kw):
            prog.update(state.global_step)

    args = DPOConfig(output_dir=str(run.path / "trainer"), per_device_train_batch_size=s.batch_size,
                     gradient_accumulation_steps=s.grad_accum, max_steps=plan.total, warmup_steps=plan.warmup,
                     learning_rate=s.learning_rate, weight_decay=s.weight_decay, max_grad_norm=s.grad_clip,
                     lr_scheduler_type="cosine", beta=s.beta, max_length=s.max_length, logging_steps=1,
                     save_strategy="no", seed=s.seed, disable_tqdm=True,
                     **cpu_defaults(dev, activation_checkpointing=s.gradient_checkpointing))
    trainer = DPOTrainer(model=load_model(model_path, device=dev), args=args, train_dataset=Dataset.from_list(prefs),
                         processing_class=tok, peft_config=None if s.full else lora_config(s), callbacks=[Log()])
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    with prog:
        res = trainer.train()
    run.save_model(trainer.save_model, tok, s.full)
    shutil.rmtree(run.path / "trainer", ignore_errors=True)
    _, losses = loss_points(run.log_path)
    metrics = {"steps": res.global_step, "warmup_steps": plan.warmup, "train_s": round(time.perf_counter() - t0, 3),
               "first_loss": losses[0] if losses else None, "final_loss": res.training_loss, "lr": s.learning_rate}
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return run.finish(metrics, model_label(s.model), source, trainable_params=trainable, pairs=len(prefs),
                      conversations=len(prefs))
