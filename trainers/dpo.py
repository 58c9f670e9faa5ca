"""Preference tuning with TRL's DPOTrainer (llm_finetune --method dpo) on prompt/chosen/rejected rows.

Rows in TRL's preference format: `prompt` (text or a list of messages) with `chosen` / `rejected` (text or
assistant message lists), as the views wing's `dpo` view writes them. Messages are normalised to our chat
template's shape (tool-call arguments as objects). CPU-safe config from config.cpu_defaults().
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass

from .chat import normalize_messages, normalize_tools
from .config import RunSettings, cpu_defaults, set_threads, setup_env
from .errors import TrainerInputError


@dataclass
class DPOSettings(RunSettings):
    beta: float = 0.1


def _side(v, name: str, i: int):
    if isinstance(v, str):
        try:
            parsed = json.loads(v)
            if isinstance(parsed, list):
                v = parsed
        except ValueError:
            return v
    if isinstance(v, list):
        try:
            return normalize_messages(v)
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


def run_dpo(s: DPOSettings, console=None) -> dict:
    setup_env()
    set_threads(s.threads)
    from .data import load_rows
    from .models import load_model, load_tokenizer, model_label, resolve_model
    from .sft import new_run_folder, record_run, write_loss_plot

    run_id, out = new_run_folder("dpo", s.output)
    try:
        rows, manifest, source = load_rows(s.data, s.lake_root, out)
        prefs = preference_rows(rows, source, s.split)
        model_path = resolve_model(s.model)
        tok = load_tokenizer(model_path, s.chat_template)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    (out / "manifest.json").write_text(json.dumps({**manifest, "rows_used": len(prefs)}, indent=2, default=str))

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import DPOConfig, DPOTrainer

    model = load_model(model_path)
    peft_cfg = None
    if not s.full:
        peft_cfg = LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, target_modules=s.lora_targets(), lora_dropout=0.0,
                              task_type="CAUSAL_LM")
    log_path = out / "train_log.jsonl"
    log_f = log_path.open("w")
    t0 = time.perf_counter()

    class Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                log_f.write(json.dumps({"step": state.global_step, "elapsed_s": round(time.perf_counter() - t0, 3),
                                        **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}) + "\n")
                log_f.flush()

    args = DPOConfig(output_dir=str(out / "trainer"), per_device_train_batch_size=s.batch_size,
                     num_train_epochs=s.epochs, max_steps=s.max_steps or -1,
                     learning_rate=s.lr if s.lr is not None else (5e-4 if s.full else 1e-4), beta=s.beta,
                     max_length=s.max_length, logging_steps=1, save_strategy="no", seed=s.seed,
                     disable_tqdm=True, **cpu_defaults())
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(prefs), processing_class=tok,
                         peft_config=peft_cfg, callbacks=[Log()])
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    res = trainer.train()
    log_f.close()
    save_dir = out / ("model" if s.full else "adapter")
    trainer.save_model(str(save_dir))
    tok.save_pretrained(save_dir)
    shutil.rmtree(out / "trainer", ignore_errors=True)
    plot = write_loss_plot(log_path, out / "loss.png", title=f"{run_id} DPO ({model_label(s.model)})")
    recs = [json.loads(l) for l in log_path.read_text().splitlines() if l.strip()]
    metrics = {"steps": res.global_step, "train_s": round(time.perf_counter() - t0, 3), "final_loss": res.training_loss,
               "first_loss": recs[0]["loss"] if recs else None, "pairs": len(prefs)}
    settings = {**asdict(s), "model_path": model_path}
    (out / "config.json").write_text(json.dumps(settings, indent=2, default=str))
    summary = {"run_id": run_id, "kind": "instruct-dpo", "status": "completed", "model": model_label(s.model),
               "adapter_path": str(save_dir), "run_dir": str(out), "data": source, "loss_plot": str(plot) if plot else None,
               "conversations": len(prefs), **metrics}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if s.record_in_lake:
        summary["lake_version"] = record_run(s.lake_root, {
            "run_id": run_id, "kind": "train", "status": "completed", "model": summary["model"],
            "adapter_path": str(save_dir.resolve()), "config": settings, "metrics": metrics,
            "manifest": json.loads((out / "manifest.json").read_text()),
            "metadata": {"run_dir": str(out.resolve()), "trainer": "trl.DPOTrainer", "method": "dpo"}})
    return summary
