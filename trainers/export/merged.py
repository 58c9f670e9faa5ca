"""`lake export-model`: a run's weights as one self-contained Hugging Face model folder other engines load.

Why: a LoRA run leaves an adapter that only peft on top of the exact base model can use, and a streaming trainer
leaves one checkpoint per increment; vLLM (without --enable-lora), TGI, transformers and the GGUF converters want
one folder with the full weights, the tokenizer and the chat template. `--format merged` loads the base through
the same `from_pretrained` path training used, merges the adapter into it (peft `merge_and_unload`: W + B A *
alpha / r, so the merged model computes what the adapter model does: logits equal within 1e-5 in float32, tested)
and writes safetensors, config.json, the tokenizer and chat_template.jinja. A fully fine-tuned run (the tiny
model trains in full) is loaded and saved the same way. The folder is written under a temporary name and renamed
into place, so an interrupted export leaves no half folder under the asked name.

`--format gguf` adds `model.gguf` to that folder for llama.cpp and ollama (trainers/export/gguf.py: Llama-architecture
models, F32 or F16; the `gguf` package has no Hugging Face converter of its own, llama.cpp's script is on no registry).
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from ground.atomic import folder_atomically
from lake.output_folder import check_output_folder
from trainers.export.config import ExportModelConfig
from trainers.export.gguf import GGUF_NAME, write_gguf
from trainers.modeling.models import load_model, load_tokenizer, resolve_model
from trainers.runtime import checkpoint
from trainers.runtime.device import quiet_transformers, setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import TINY_MARKER, readable_like_created
from trainers.runtime.run_reader import RunReader
from trainers.runtime.weights_files import check_weights

PROVENANCE = "lachesis_export.json"  # written beside the weights: which run, step and adapter they come from


def check_export(cfg: ExportModelConfig) -> tuple[Path, int | None]:
    """The run's weights and step once the output may be written (lake/output_folder.py's rules, as `lake export`'s:
    outside every lake, and outside what this run's later exports read: its weights and its checkpoints/, where a
    model folder would pass for the newest step) and the weights may be opened (no pickle, FIFO or truncated
    file: trainers/runtime/weights_files.py). One line, before the model loads."""
    reader = RunReader.open(cfg.run, "run")
    weights, step = reader.weights(cfg.step)
    run_folder = reader.path.parent.parent if reader.is_checkpoint() else reader.path
    check_output_folder(cfg.output, avoid=[weights, run_folder / checkpoint.DIR], error=TrainerInputError)
    check_weights(weights)
    return weights, step


def base_of(adapter: Path, model: str | None) -> str:
    """The base model folder of a LoRA adapter: --model, else the adapter's base_model_name_or_path."""
    if model:
        return resolve_model(model)
    base = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    if not base or not Path(base).is_dir():
        raise TrainerInputError(f"the adapter {adapter} was trained on {base!r}, which is not a folder here: pass its "
                                "base model with --model (tiny | smollm2 | a folder)")
    return resolve_model(base)


def export_model(cfg: ExportModelConfig, console=None) -> dict:
    """Write the merged model of `cfg.run` to `cfg.output`. Returns what the command prints."""
    import torch

    setup_env()
    quiet_transformers()
    t0 = time.perf_counter()
    weights, step = check_export(cfg)
    lora = (weights / "adapter_config.json").is_file()
    base = base_of(weights, cfg.model) if lora else str(weights)
    say = console.print if console is not None else (lambda *_a, **_k: None)
    say(f"loading {base}" + (f" + adapter {weights}" if lora else ""), highlight=False)
    cpu = torch.device("cpu")  # merging is a few additions per layer; the export must not need a GPU
    model = load_model(base, str(weights) if lora else None, device=cpu, dtype=torch.float32)
    if lora:
        model = model.merge_and_unload()  # W += B A * alpha / r in every adapted layer; a plain model is left
    model = model.to(getattr(torch, cfg.dtype))
    tok = load_tokenizer(str(weights) if (weights / "tokenizer_config.json").is_file() else base)
    out = Path(cfg.output).expanduser()
    with folder_atomically(out) as tmp:  # the empty folder the user made, if any, is replaced by the complete one
        model.save_pretrained(tmp)  # safetensors
        tok.save_pretrained(tmp)  # tokenizer + chat_template.jinja
        if (Path(base) / TINY_MARKER).is_file():  # still a from-scratch model: full fine-tuning by default
            shutil.copy2(Path(base) / TINY_MARKER, tmp / TINY_MARKER)
        if cfg.format == "gguf":
            say(f"writing {GGUF_NAME}", highlight=False)
            write_gguf(tmp, model, tok, tmp / GGUF_NAME, f16=cfg.dtype == "float16")
        info = {"format": cfg.format, "run": str(Path(cfg.run).expanduser().resolve()), "step": step,
                "weights": str(weights.resolve()), "lora": lora, "base_model": base, "dtype": cfg.dtype,
                "output": str(out.resolve()), "gguf": str(out.resolve() / GGUF_NAME) if cfg.format == "gguf" else None,
                "parameters": sum(p.numel() for p in model.parameters()), "config": asdict(cfg)}
        (tmp / PROVENANCE).write_text(json.dumps(info, indent=2))
        readable_like_created(tmp)  # save_pretrained leaves model.safetensors 0600
    info["export_s"] = round(time.perf_counter() - t0, 3)
    return info
