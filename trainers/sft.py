"""Supervised fine-tuning on chat conversations with tool calls, assistant-only loss (rl_finetune_supervised,
llm_finetune --method sft).

The training path is our own loop over pre-tokenised batches: each conversation is rendered once by the chat
template with `return_assistant_tokens_mask=True`, so labels are exactly the assistant's tokens (its tool calls
and closing `<|im_end|>`), and a batch's shared prompt prefix runs once. Full fine-tuning for a model trained
from scratch, LoRA (peft) for a pretrained one (trainers/config.py decides); CPU float32 by default, the GPU when
there is one. A run stops on its planned, seeded step count, never on wall time, so it is reproducible.

The same loop runs in one process or many (`torchrun --nproc_per_node N -m lachesis.train_cli ...`, or
`accelerate launch` with a config of configs/accelerate/): trainers/distributed.py. A step's loss is the mean
over the labelled tokens of its whole global batch (every micro-batch of the step, every process), so N
processes at --batch-size B train as one process at --batch-size N*B (tests/test_ddp.py).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from .config import SFTConfig, StepPlan, TrainConfig, set_threads, setup_env
from .data import conversations, load_rows
from .distributed import Processes
from .errors import TrainerInputError
from .models import checkpoint_activations, load_model, load_tokenizer, model_label, resolve_model, trained_from_scratch
from .runfolder import RunFolder

IGNORE = -100


# ----------------------------------------------------------------------------------------------- tokenisation
def encode_conversation(tok, conv: dict, max_length: int | None = None) -> tuple[list[int], list[int]]:
    """(input_ids, labels): labels equal input_ids on assistant tokens and IGNORE elsewhere."""
    out = tok.apply_chat_template(
        conv["messages"], tools=conv.get("tools"), tokenize=True, return_dict=True,
        return_assistant_tokens_mask=True, add_generation_prompt=False,
    )
    ids = list(out["input_ids"])
    mask = list(out["assistant_masks"])
    if max_length and len(ids) > max_length:
        ids, mask = ids[:max_length], mask[:max_length]
    labels = [t if m else IGNORE for t, m in zip(ids, mask)]
    return ids, labels


def encode_all(tok, convs: list[dict], max_length: int) -> tuple[list[tuple[list[int], list[int]]], dict]:
    examples, truncated, no_labels = [], 0, 0
    for c in convs:
        ids, labels = encode_conversation(tok, c, None)
        if len(ids) > max_length:
            truncated += 1
            ids, labels = ids[:max_length], labels[:max_length]
        if not any(l != IGNORE for l in labels):
            no_labels += 1
            continue
        examples.append((ids, labels))
    return examples, {"examples": len(examples), "truncated": truncated, "no_assistant_tokens": no_labels}


def length_bucketed_batches(lengths: list[int], batch_size: int, rng: random.Random, bucket_batches: int = 32,
                            groups: list[int] | None = None, by_length: bool = False) -> list[list[int]]:
    """Random batches of one prompt group each (same system prompt + tools, so the shared prefix is long);
    `by_length` also sorts windows of `bucket_batches` batches by length (less padding, but batches of similar
    length are often one task template: measured worse for learning here, so off by default)."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    g = groups or [0] * len(lengths)
    window = batch_size * bucket_batches if by_length else len(idx)
    batches = []
    for s in range(0, len(idx), window):
        key = (lambda i: (g[i], lengths[i])) if by_length else (lambda i: g[i])
        chunk = sorted(idx[s : s + window], key=key)  # stable: random order within a group
        batches.extend(chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(examples, batch: list[int], pad_id: int):
    L = max(len(examples[i][0]) for i in batch)
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), L), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), L), dtype=torch.long)
    for r, i in enumerate(batch):
        x, y = examples[i]
        ids[r, : len(x)] = torch.tensor(x)
        labels[r, : len(y)] = torch.tensor(y)
        att[r, : len(x)] = 1
    return ids, labels, att


def first_label_pos(labels: list[int]) -> int:
    for i, l in enumerate(labels):
        if l != IGNORE:
            return i
    return len(labels)


def shared_prefix_len(examples, batch: list[int], first_labels: list[int]) -> int:
    """Length P of the token prefix every sequence of the batch shares, with no label at positions <= P (so the
    loss computed on the suffixes equals the full-sequence loss exactly)."""
    first = examples[batch[0]][0]
    P = min(len(examples[i][0]) for i in batch) - 1
    P = min(P, min(first_labels[i] for i in batch) - 1)
    for i in batch[1:]:
        x = examples[i][0]
        j = 0
        while j < P and x[j] == first[j]:
            j += 1
        P = j
        if P == 0:
            break
    return max(P, 0)


def collate_suffix(examples, batch: list[int], P: int, pad_id: int):
    """Suffixes after the shared prefix (right padded) + the attention mask over prefix and suffix."""
    L = max(len(examples[i][0]) for i in batch) - P
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), L), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), P + L), dtype=torch.long)
    att[:, :P] = 1
    for r, i in enumerate(batch):
        x, y = examples[i]
        ids[r, : len(x) - P] = torch.tensor(x[P:])
        labels[r, : len(y) - P] = torch.tensor(y[P:])
        att[r, P : len(x)] = 1
    return torch.tensor([examples[batch[0]][0][:P]]), ids, labels, att


def _decoder(model):
    """The transformer body (LlamaModel) under a causal-LM head, through a peft wrapper if any."""
    from peft import PeftModel

    return (model.get_base_model() if isinstance(model, PeftModel) else model).get_decoder()


# model types whose causal-LM head is a plain linear layer on the last hidden state (no logit scaling or
# soft-capping), so applying it to the labelled positions alone gives exactly the model's own logits there
PLAIN_HEAD_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def causal_lm_loss(model, labels, reduction: str = "mean", **inputs):
    """Next-token cross-entropy over the labelled positions (their mean, or their sum with reduction="sum"), as
    `model(**inputs, labels=labels).loss`, with the output layer applied to those positions only. The model's own
    path computes logits at every position (8 x 900 tokens x SmolLM2's 49,152-word vocabulary = 1.4 GB of float32,
    copied several times by the loss: a 21 GB peak measured at batch 8) although labels cover ~20% of the tokens;
    same value and gradients (tested)."""
    if model.config.model_type not in PLAIN_HEAD_TYPES:
        loss = model(**inputs, labels=labels).loss
        return loss * label_targets(labels) if reduction == "sum" else loss
    target = labels[:, 1:]
    keep = target != IGNORE
    return F.cross_entropy(logits_at(model, keep, **inputs).float(), target[keep], reduction=reduction)


def logits_at(model, keep, **inputs):
    """The model's next-token logits at the positions `keep` (B x L-1, position t predicts token t+1) marks: with
    a plain linear head (PLAIN_HEAD_TYPES) the head runs on those positions only, else on all and indexed."""
    if model.config.model_type not in PLAIN_HEAD_TYPES:
        return model(**inputs).logits[:, :-1][keep]
    hidden = _decoder(model)(**inputs).last_hidden_state[:, :-1]
    return model.get_output_embeddings()(hidden[keep])


def label_targets(labels) -> int:
    """How many positions a causal LM loss counts: labelled tokens after the first position (the shift)."""
    return int((labels[:, 1:] != IGNORE).sum())


def shared_prefix_inputs(model, prefix, ids, att) -> dict:
    """The forward arguments of a batch of suffixes `ids` (right padded) whose rows share `prefix`: the prefix runs
    once (batch 1) and its KV cache is expanded to the batch; gradients flow through it (SFT's loss, GRPO's update)."""
    B, S = ids.shape
    P = prefix.shape[1]
    out = _decoder(model)(input_ids=prefix, use_cache=True)
    cache = out["cache"]  # transformers 5 names it `cache` (4.x: past_key_values)
    for layer in cache.layers:
        layer.keys = layer.keys.expand(B, -1, -1, -1)
        layer.values = layer.values.expand(B, -1, -1, -1)
    pos = torch.arange(P, P + S, device=ids.device)
    return dict(input_ids=ids, attention_mask=att, position_ids=pos.unsqueeze(0).expand(B, -1), cache_position=pos,
                cache=cache, use_cache=True)


def forward_shared_prefix(model, prefix, ids, labels, att, reduction: str = "mean"):
    """Loss of a batch whose rows share `prefix` (shared_prefix_inputs). Equal to the full-sequence loss (tested)."""
    # no label at the suffix's first position (shared_prefix_len), so the shift inside the suffix loses nothing
    return causal_lm_loss(model, labels, reduction, **shared_prefix_inputs(model, prefix, ids, att))


class SFTLoss(torch.nn.Module):
    """The summed loss of a micro-batch as a module around the model, so that the whole forward (the shared prefix,
    the label-only head) runs inside what accelerate wraps: DDP synchronises gradients, and FSDP / DeepSpeed gather
    parameters, only for a forward that goes through their wrapper."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def _no_split_modules(self):
        """The model's decoder layer class(es): FSDP's transformer-based wrap (configs/accelerate/fsdp.yaml) reads it."""
        return self.model._no_split_modules

    def forward(self, ids, labels, att, prefix=None):
        if prefix is not None:
            return forward_shared_prefix(self.model, prefix, ids, labels, att, reduction="sum")
        return causal_lm_loss(self.model, labels, "sum", input_ids=ids, attention_mask=att)


# ----------------------------------------------------------------------------------------------- model setup
def prepare_model(model, s: TrainConfig):
    """LoRA (peft) unless s.full; returns (model, trainable parameter count)."""
    if not s.full:
        from peft import get_peft_model

        try:
            model = get_peft_model(model, lora_config(s))
        except ValueError as exc:
            raise TrainerInputError(f"LoRA target modules {s.target_modules!r} do not match the model: {exc}"
                                    " (use --target-modules all-linear or names such as q_proj,v_proj)") from None
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, n


def lora_config(s: TrainConfig):
    from peft import LoraConfig

    return LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                      target_modules=s.lora_targets(), task_type="CAUSAL_LM")


def lr_at(step: int, plan: StepPlan, s: SFTConfig) -> float:
    """Linear warm-up (bounded by the run's length), then cosine decay to min_lr_ratio at the last step."""
    if step < plan.warmup:
        return s.lr * (step + 1) / plan.warmup
    p = min(max(step / plan.total, 0.0), 1.0)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


# ----------------------------------------------------------------------------------------------- the loop
def global_batches(examples, s: SFTConfig, processes: int) -> Iterator[list[int]]:
    """Endless seeded global batches of `s.batch_size` x `processes` examples, epoch after epoch (the same on every
    process). A batch smaller than the processes (an epoch's remainder) is left out: every process must train on
    something at every step, or the others wait for its gradients."""
    rng = random.Random(s.seed)
    lengths = [len(x) for x, _ in examples]
    first_labels = [first_label_pos(y) for _, y in examples]
    groups = [hash(tuple(x[: min(f, 256)])) & 0xFFFF for (x, _), f in zip(examples, first_labels)]
    while True:
        for batch in length_bucketed_batches(lengths, s.batch_size * processes, rng, groups=groups,
                                             by_length=s.bucket_by_length):
            if len(batch) >= processes:
                yield batch


@dataclass
class MicroBatch:
    """What one process feeds the model for its slice of a global batch."""

    inputs: tuple  # (ids, labels, att) or (ids, labels, att, prefix): SFTLoss's arguments
    shared: int  # prefix tokens computed once instead of len(batch) times

    @classmethod
    def of(cls, examples, batch: list[int], s: SFTConfig, first_labels: list[int], pad_id: int, dev) -> "MicroBatch":
        # the shared prefix hands its KV cache to the suffixes; transformers turns the cache off in a training
        # forward with checkpointing, so a checkpointed run feeds whole sequences
        shares = s.share_prefix and not s.gradient_checkpointing and len(batch) > 1
        P = shared_prefix_len(examples, batch, first_labels) if shares else 0
        if P >= 16:
            prefix, ids, labels, att = (t.to(dev) for t in collate_suffix(examples, batch, P, pad_id))
            return cls((ids, labels, att, prefix), P * (len(batch) - 1))
        return cls(tuple(t.to(dev) for t in collate(examples, batch, pad_id)), 0)


def make_optimizer(model, s: SFTConfig):
    """AdamW over the trainable parameters, weight decay on matrices only."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=s.lr, betas=(0.9, 0.95), eps=1e-8)


def train_loop(model, examples, s: SFTConfig, pad_id: int, on_log: Callable[[dict], None] | None = None,
               progress_cb: Callable[[int, int, dict], None] | None = None, procs: Processes | None = None,
               on_trained: Callable[[dict], None] | None = None, optimizer=None) -> dict:
    """The optimisation loop, `s.plan(len(examples), processes).total` optimizer steps. `s.lr` must be settled
    (TrainConfig.settle). `procs`: the run's processes (default: this one alone, on the model's device). Returns
    metrics (the whole run's, the same on every process); calls on_log at step 1, every s.log_interval(total) steps and at
    the last step, and at the end `on_trained(the model's whole state dict)` on every process (FSDP and DeepSpeed
    ZeRO-3 gather the shards for it: every process takes part)."""
    procs = procs or Processes.start(str(next(model.parameters()).device))
    W = procs.world
    plan = s.plan(len(examples), W)
    # `optimizer` (make_optimizer's): its state continues (the streaming trainer keeps one across increments)
    opt = optimizer if optimizer is not None else make_optimizer(model, s)
    acc = procs.accelerator(s.grad_accum, s.batch_size)
    wrapped, opt = acc.prepare(SFTLoss(model), opt)
    torch.manual_seed(s.seed)
    first_labels = [first_label_pos(y) for _, y in examples]
    # per example, known on every process: so each one knows the whole step's token counts without asking
    targets = [sum(l != IGNORE for l in y[1:]) for _, y in examples]
    labelled = [sum(l != IGNORE for l in y) for _, y in examples]
    batches = global_batches(examples, s, W)
    micro_per_epoch = math.ceil(len(examples) / (s.batch_size * W))
    model.train()
    micro, tokens, label_tokens, shared_tokens = 0, 0, 0, 0
    losses: list[float] = []
    t0 = time.perf_counter()
    window: list[float] = []
    for step in range(1, plan.total + 1):
        lr = lr_at(step - 1, plan, s)
        for g in opt.param_groups:  # before the backward passes: DeepSpeed steps inside the last one
            g["lr"] = lr
        step_batches = [next(batches) for _ in range(s.grad_accum)]
        n_targets = max(1, sum(targets[i] for b in step_batches for i in b))
        step_loss, shared = 0.0, 0
        for batch in step_batches:
            mb = MicroBatch.of(examples, procs.part(batch), s, first_labels, pad_id, procs.device)
            with acc.accumulate(wrapped):
                part = wrapped(*mb.inputs) / n_targets
                # accelerate divides by grad_accum, and DDP / FSDP / DeepSpeed average over the processes: scaled
                # back, the processes' gradients add up to the whole step's mean over its labelled tokens
                acc.backward(part * (W * s.grad_accum))
                if acc.sync_gradients and s.grad_clip:
                    acc.clip_grad_norm_(list(wrapped.parameters()), s.grad_clip)
            step_loss += float(part.detach())
            shared += mb.shared
            micro += 1
            tokens += sum(len(examples[i][0]) for i in batch)
            label_tokens += sum(labelled[i] for i in batch)
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = acc.reduce(torch.tensor([step_loss, float(shared)], device=procs.device), "sum").tolist()
        losses.append(total[0])
        window.append(total[0])
        shared_tokens += int(total[1])
        rec = None
        if step % s.log_interval(plan.total) == 0 or step == 1 or step == plan.total:
            elapsed = time.perf_counter() - t0
            rec = {"step": step, "epoch": round(micro / micro_per_epoch, 4),
                   "loss": round(sum(window) / len(window), 5), "lr": lr, "tokens": tokens,
                   "label_tokens": label_tokens, "elapsed_s": round(elapsed, 3),
                   "tokens_per_s": round(tokens / max(elapsed, 1e-9), 1)}
            window = []
            if on_log:
                on_log(rec)
        if progress_cb:
            progress_cb(step, plan.total, rec or {})
    train_s = time.perf_counter() - t0
    model.eval()
    if on_trained:
        on_trained({k.removeprefix("model."): v for k, v in acc.get_state_dict(wrapped).items()})
    tail = losses[-max(1, min(20, len(losses) // 5 or 1)):]
    return {"steps": plan.total, "warmup_steps": plan.warmup, "micro_steps": micro,
            "epochs_done": round(micro / micro_per_epoch, 3), "tokens": tokens, "label_tokens": label_tokens,
            "train_s": round(train_s, 3), "tokens_per_s": round(tokens / max(train_s, 1e-9), 1),
            "first_loss": losses[0] if losses else None, "prefix_tokens_shared": shared_tokens,
            "final_loss": sum(tail) / len(tail) if tail else None, "lr": s.lr,
            "processes": W, "distributed": acc.distributed_type.value, "global_batch": s.batch_size * W * s.grad_accum}


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
    rows, manifest, source = load_rows(data, s.lake_root, work_dir)
    convs, data_stats = conversations(rows, source, s.split, s.max_length)
    model_path = resolve_model(s.model)
    tok = load_tokenizer(model_path, s.chat_template)
    examples, enc_stats = encode_all(tok, convs, s.max_length)
    if not examples:
        raise TrainerInputError(f"dataset {source}: no conversation has assistant tokens within --max-length {s.max_length}")
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
    if run is not None:
        s, plan = run.start(s, prep.model_path, len(examples), {**prep.manifest, "filter": {"split": s.split},
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
                      f"({'full' if s.full else f'LoRA r={s.lora_r}'}, {trainable:,} trainable), {plan.total} steps "
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
    return procs.share(summary)


def _train_with_progress(model, examples, s: SFTConfig, pad_id, on_log, console, procs: Processes, on_trained):
    if not s.progress or console is None:
        return train_loop(model, examples, s, pad_id, on_log, procs=procs, on_trained=on_trained)
    from .progress import Progress

    with Progress(console, "train", s.plan(len(examples), procs.world).total) as prog:

        def cb(step, total_steps, rec):
            prog.update(step, total=total_steps,
                        info=f"loss {rec['loss']:.3f} · {rec['tokens_per_s']:.0f} tok/s" if rec else None)

        return train_loop(model, examples, s, pad_id, on_log, cb, procs, on_trained)
