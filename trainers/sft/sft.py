"""Supervised fine-tuning on chat conversations with tool calls, assistant-only loss (rl_finetune_supervised,
llm_finetune --method sft).

The training path is our own loop over pre-tokenised batches: each conversation is rendered once by the chat
template with `return_assistant_tokens_mask=True`, so labels are exactly the assistant's tokens (its tool calls
and closing `<|im_end|>`), and a batch's shared prompt prefix runs once. Full fine-tuning for a model trained
from scratch, LoRA (peft) for a pretrained one (trainers/sft/config.py decides); CPU float32 by default, the GPU when
there is one. A run stops on its planned, seeded step count, never on wall time, so it is reproducible.

The same loop runs in one process or many (`torchrun --nproc_per_node N -m lachesis.train_cli ...`, or
`accelerate launch` with a config of configs/accelerate/): trainers/sft/distributed.py. A step's loss is the mean
over the labelled tokens of its whole global batch (every micro-batch of the step, every process), so N
processes at --batch-size B train as one process at --batch-size N*B (tests/test_ddp.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from trainers.modeling.batches import encode_all
from trainers.modeling.models import checkpoint_activations, load_model, load_tokenizer, model_label, resolve_model
from trainers.runtime.device import set_threads, setup_env
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import trained_from_scratch
from trainers.runtime.runfolder import RunFolder
from trainers.sft.config import SFTConfig
from trainers.sft.data import conversations, load_rows
from trainers.sft.distributed import Processes
from trainers.sft.loop import prepare_model, train_loop
from trainers.sft.run import start_run

# ----------------------------------------------------------------------------------------------- tokenisation


# ----------------------------------------------------------------------------------------------- model setup


# ----------------------------------------------------------------------------------------------- the loop


# ----------------------------------------------------------------------------------------------- the run
@dataclass
class Prepared:
    """A run's data and tokenizer, read the same way on every process."""

    source: str  # what was read: the export a view was written to, or the given file / folder
    model_path: str
    tok: object
    examples: list
    stats: dict
    manifest: dict


def prepare_data(s: SFTConfig, data: str, work_dir=None) -> Prepared:
    """The rows cut to --max-length (the model's context by default: `settle_length`) and tokenized."""
    rows, manifest, source = load_rows(data, s.lake_root, work_dir)
    model_path = resolve_model(s.model)
    max_length = s.settle_length(model_path).max_length
    convs, data_stats = conversations(rows, source, s.split, max_length)
    # the tokenizer only after the rows are known good: loading it imports most of transformers (about 2 s), which a
    # bad dataset's one-line error does not need
    tok = load_tokenizer(model_path, s.chat_template)
    examples, enc_stats = encode_all(tok, convs, max_length)
    if not examples:
        raise TrainerInputError(f"dataset {source}: no conversation has assistant tokens within --max-length "
                                f"{max_length} (its system prompt, tools, task and last turn are kept whole)")
    return Prepared(source, model_path, tok, examples, {**data_stats, **enc_stats}, manifest)


def run_sft(s: SFTConfig, console=None, build_model: Callable | None = None) -> dict:
    """Load data + model, train, write the run folder and its `runs` event. Returns the run summary (on every
    process of a launched run; only the main one writes anything).
    `build_model(settled config) -> (model, trainable count)` replaces loading `s.model` and putting LoRA on it
    (rl_train_transfer --method sft: the source run's weights with the embeddings and lower layers frozen)."""
    setup_env()
    procs = Processes.start(s.device)  # first: --device cuda without CUDA is the one-line error before any work
    dev = procs.device
    run: RunFolder | None = None

    def on_main():
        nonlocal run
        run = RunFolder.create(s, "sft", "lachesis.sft")
        with run.setting_up():
            prep = prepare_data(s, s.data, run.path)
        return prep, prep.source

    # the main process makes the run folder and exports a view into it; the others read what it read
    prep = procs.main_first(on_main, lambda source: prepare_data(s, source))
    examples, tok = prep.examples, prep.tok
    s = s.settle_length(prep.model_path)  # what prepare_data cut the rows to, recorded with the run
    if run is not None:
        s, plan = start_run(run, s, prep.model_path, len(examples), {**prep.manifest, "filter": {"split": s.split},
                            **prep.stats}, console, processes=procs.world)
    else:
        s = s.settle(trained_from_scratch(prep.model_path))
        plan = s.plan(len(examples), procs.world)
        console = None
    set_threads(s.threads)
    torch.manual_seed(s.seed)
    if build_model is None:
        model, trainable = prepare_model(load_model(prep.model_path, device=dev), s)
    else:
        model, trainable = build_model(s)
        model = model.to(dev)
    if s.gradient_checkpointing:
        checkpoint_activations(model)
    if console is not None:
        from rich.markup import escape  # run ids and model paths are user text, not markup

        console.print(f"[bold]{s.COMMAND}[/] " + escape(
                      f"{run.run_id}: {len(examples)} conversations, "
                      f"{sum(len(x) for x, _ in examples)} tokens, model {model_label(s.model)} "
                      f"({'full' if s.full else f'LoRA r={s.lora_rank}'}, {trainable:,} trainable), {plan.total} steps "
                      f"({plan.warmup} warm-up), device {dev}"
                      + (f", {procs.world} processes" if procs.world > 1 else "")))

    def save(state: dict) -> None:
        if run is not None:
            run.save_model(lambda folder: model.save_pretrained(folder, state_dict=state), tok, s.full)

    metrics = _train_with_progress(model, examples, s, tok.pad_token_id, run.log if run else None, console, procs, save)
    summary = None
    if run is not None:
        summary = run.finish(metrics, model_label(s.model), prep.source, trainable_params=trainable,
                             conversations=len(examples))
    summary = procs.share(summary)
    procs.end()
    return summary


def _train_with_progress(model, examples, s: SFTConfig, pad_id, on_log, console, procs: Processes, on_trained):
    if not s.progress or console is None:
        return train_loop(model, examples, s, pad_id, on_log, procs=procs, on_trained=on_trained)
    from trainers.runtime.progress import Progress

    with Progress(console, "train", s.plan(len(examples), procs.world).total) as prog:

        def cb(step, total_steps, rec):
            prog.update(step, total=total_steps,
                        info=f"loss {rec['loss']:.3f} · {rec['tokens_per_s']:.0f} tok/s" if rec else None)

        return train_loop(model, examples, s, pad_id, on_log, cb, procs, on_trained)
