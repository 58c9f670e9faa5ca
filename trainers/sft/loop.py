"""The SFT training loop over pre-tokenised batches: LoRA or full fine-tuning, the learning-rate schedule, the
optimizer, and the global batches of one or many processes. It reads no lake: data arrives as token ids.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from trainers.modeling.batches import (
    collate,
    collate_suffix,
    first_label_pos,
    length_bucketed_batches,
    shared_prefix_len,
)
from trainers.modeling.forward import IGNORE, SFTLoss
from trainers.runtime.errors import TrainerInputError
from trainers.sft.config import SFTConfig, StepPlan, TrainConfig
from trainers.sft.distributed import Processes


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

    return LoraConfig(r=s.lora_rank, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                      target_modules=s.lora_targets(), task_type="CAUSAL_LM")


def lr_at(step: int, plan: StepPlan, s: SFTConfig) -> float:
    """Linear warm-up (bounded by the run's length), then cosine decay to min_lr_ratio at the last step."""
    if step < plan.warmup:
        return s.learning_rate * (step + 1) / plan.warmup
    p = min(max(step / plan.total, 0.0), 1.0)
    return s.learning_rate * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


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
                             lr=s.learning_rate, betas=(0.9, 0.95), eps=1e-8)


def train_loop(model, examples, s: SFTConfig, pad_id: int, on_log: Callable[[dict], None] | None = None,
               progress_cb: Callable[[int, int, dict], None] | None = None, procs: Processes | None = None,
               on_trained: Callable[[dict], None] | None = None, optimizer=None) -> dict:
    """The optimisation loop, `s.plan(len(examples), processes).total` optimizer steps. `s.learning_rate` must be settled
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
            "final_loss": sum(tail) / len(tail) if tail else None, "lr": s.learning_rate,
            "processes": W, "distributed": acc.distributed_type.value, "global_batch": s.batch_size * W * s.grad_accum}
