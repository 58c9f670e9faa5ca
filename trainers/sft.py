"""Supervised fine-tuning on chat conversations with tool calls, assistant-only loss (rl_finetune_supervised,
llm_finetune --method sft).

The training path is our own loop over pre-tokenised, length-bucketed batches: each conversation is rendered
once by the chat template with `return_assistant_tokens_mask=True`, so labels are exactly the assistant's
tokens (its tool calls and closing `<|im_end|>`), and batches are built from conversations of similar length so
almost no compute goes to padding. LoRA (peft) by default, full fine-tuning by option; CPU float32 by default,
the GPU when there is one.
"""
from __future__ import annotations

import json
import math
import random
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .config import RunSettings, device as pick_device, set_threads, setup_env
from .errors import TrainerInputError

IGNORE = -100


@dataclass
class SFTSettings(RunSettings):
    epochs: float = 3.0
    time_budget_s: float | None = None  # stop after this much training time (the lr schedule follows the clock)
    lr: float | None = None  # default: 1e-3 for full fine-tuning of the tiny model, 2e-4 for LoRA
    batch_size: int = 16
    grad_accum: int = 1
    lora_dropout: float = 0.0
    share_prefix: bool = True  # compute a batch's common prompt prefix (system prompt + tools) once
    bucket_by_length: bool = False
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    split: str | None = "train"
    log_every: int = 10
    plot: bool = True
    progress: bool = True
    kind: str = "train"
    extra: dict = field(default_factory=dict)


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
    import torch

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
    import torch

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
    m = model.get_base_model() if hasattr(model, "get_base_model") else model
    return m.model if hasattr(m, "model") else m.get_decoder()


def forward_shared_prefix(model, prefix, ids, labels, att):
    """Loss of a batch whose rows share `prefix`: the prefix runs once (batch 1) and its KV cache is expanded to
    the batch; gradients flow through it. Equal to the full-sequence loss (tested)."""
    import torch

    B, S = ids.shape
    P = prefix.shape[1]
    out = _decoder(model)(input_ids=prefix, use_cache=True)
    cache = out["cache"] if "cache" in out else out["past_key_values"]
    for layer in cache.layers:
        layer.keys = layer.keys.expand(B, -1, -1, -1)
        layer.values = layer.values.expand(B, -1, -1, -1)
    pos = torch.arange(P, P + S, device=ids.device)
    return model(input_ids=ids, attention_mask=att, position_ids=pos.unsqueeze(0).expand(B, -1), cache_position=pos,
                 cache=cache, labels=labels, use_cache=True).loss


# ----------------------------------------------------------------------------------------------- model setup
def prepare_model(model, s: SFTSettings):
    """LoRA (peft) unless s.full; returns (model, trainable parameter count)."""
    if not s.full:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                         target_modules=s.lora_targets(), task_type="CAUSAL_LM")
        try:
            model = get_peft_model(model, cfg)
        except ValueError as exc:
            raise TrainerInputError(f"LoRA target modules {s.target_modules!r} do not match the model: {exc}"
                                    " (use --target-modules all-linear or names such as q_proj,v_proj)") from None
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, n


def lr_at(step: int, progress: float, s: SFTSettings, base_lr: float) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio over training progress (steps or clock)."""
    if step < s.warmup_steps:
        return base_lr * (step + 1) / s.warmup_steps
    p = min(max(progress, 0.0), 1.0)
    return base_lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


# ----------------------------------------------------------------------------------------------- the run
def new_run_id(prefix: str = "sft") -> str:
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def new_run_folder(prefix: str, output: str | None) -> tuple[str, Path]:
    """A run id and its empty folder (default runs/<run_id>); a non-empty --output is refused."""
    run_id = new_run_id(prefix)
    out = Path(output or Path("runs") / run_id).expanduser()
    if out.exists() and any(out.iterdir()):
        raise TrainerInputError(f"output folder {out} is not empty: pass a new --output folder")
    out.mkdir(parents=True, exist_ok=True)
    return run_id, out


def train_loop(model, examples, s: SFTSettings, pad_id: int, on_log: Callable[[dict], None] | None = None,
               progress_cb: Callable[[int, int, dict], None] | None = None) -> dict:
    """The optimisation loop. Returns metrics; calls on_log every s.log_every optimizer steps."""
    import torch

    dev = next(model.parameters()).device
    base_lr = s.lr if s.lr is not None else (1e-3 if s.full else 2e-4)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=base_lr, betas=(0.9, 0.95), eps=1e-8)
    rng = random.Random(s.seed)
    torch.manual_seed(s.seed)
    lengths = [len(x) for x, _ in examples]
    first_labels = [first_label_pos(y) for _, y in examples]
    groups = [hash(tuple(x[: min(f, 256)])) & 0xFFFF for (x, _), f in zip(examples, first_labels)]
    shared_tokens = 0
    per_epoch = math.ceil(len(examples) / s.batch_size)
    opt_steps_per_epoch = max(1, per_epoch // s.grad_accum)
    total_steps = s.max_steps or max(1, int(math.ceil(s.epochs * opt_steps_per_epoch)))
    model.train()
    step, micro, tokens, label_tokens = 0, 0, 0, 0
    losses: list[float] = []
    first_loss = None
    t0 = time.perf_counter()
    window_loss, window_n = 0.0, 0
    done = False
    epoch = 0
    while not done:
        for batch in length_bucketed_batches(lengths, s.batch_size, rng, groups=groups, by_length=s.bucket_by_length):
            P = shared_prefix_len(examples, batch, first_labels) if s.share_prefix and len(batch) > 1 else 0
            if P >= 16:
                prefix, ids, labels, att = (t.to(dev) for t in collate_suffix(examples, batch, P, pad_id))
                loss = forward_shared_prefix(model, prefix, ids, labels, att)
                shared_tokens += P * (len(batch) - 1)
            else:
                ids, labels, att = (t.to(dev) for t in collate(examples, batch, pad_id))
                loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
            (loss / s.grad_accum).backward()
            micro += 1
            tokens += int(att.sum())
            label_tokens += int((labels != IGNORE).sum())
            lv = float(loss.detach())
            window_loss += lv
            window_n += 1
            if first_loss is None:
                first_loss = lv
            if micro % s.grad_accum:
                continue
            elapsed = time.perf_counter() - t0
            progress = step / total_steps
            if s.time_budget_s:
                progress = max(progress if s.max_steps else 0.0, elapsed / s.time_budget_s)
            lr = lr_at(step, progress, s, base_lr)
            for g in opt.param_groups:
                g["lr"] = lr
            if s.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            losses.append(lv)
            rec = None
            if step % s.log_every == 0 or step == 1:
                rec = {"step": step, "epoch": round(epoch + micro / max(1, per_epoch) - epoch, 4), "loss": round(window_loss / window_n, 5),
                       "lr": lr, "tokens": tokens, "label_tokens": label_tokens, "elapsed_s": round(elapsed, 3),
                       "tokens_per_s": round(tokens / max(elapsed, 1e-9), 1)}
                window_loss, window_n = 0.0, 0
                if on_log:
                    on_log(rec)
            if progress_cb:
                progress_cb(step, total_steps, rec or {})
            if (not s.time_budget_s and step >= total_steps) or (s.max_steps and step >= s.max_steps):
                done = True
            elif s.time_budget_s and time.perf_counter() - t0 >= s.time_budget_s:
                done = True
            if done:
                break
        epoch += 1
        if s.time_budget_s is None and s.max_steps is None and epoch >= math.ceil(s.epochs):
            done = True
    train_s = time.perf_counter() - t0
    model.eval()
    tail = losses[-max(1, min(20, len(losses) // 5 or 1)):]
    return {"steps": step, "micro_steps": micro, "epochs_done": round(micro / max(1, per_epoch), 3),
            "tokens": tokens, "label_tokens": label_tokens, "train_s": round(train_s, 3),
            "tokens_per_s": round(tokens / max(train_s, 1e-9), 1), "first_loss": first_loss,
            "prefix_tokens_shared": shared_tokens,
            "final_loss": sum(tail) / len(tail) if tail else None, "lr": base_lr}


def run_sft(s: SFTSettings, console=None) -> dict:
    """Load data + model, train, save the run folder, record a `runs` event. Returns the run summary."""
    setup_env()
    from .data import conversations, load_rows
    from .models import load_model, load_tokenizer, model_label, resolve_model

    run_id, out = new_run_folder("sft" if s.kind == "train" else s.kind, s.output)
    try:
        rows, manifest, source = load_rows(s.data, s.lake_root, out)
        convs, data_stats = conversations(rows, source, s.split)
        model_path = resolve_model(s.model)
        tok = load_tokenizer(model_path, s.chat_template)
        examples, enc_stats = encode_all(tok, convs, s.max_length)
        if not examples:
            raise TrainerInputError(f"dataset {source}: no conversation has assistant tokens within --max-length {s.max_length}")
    except BaseException:
        if not any(p for p in out.iterdir() if p.name != "dataset"):
            shutil.rmtree(out, ignore_errors=True)
        raise
    (out / "manifest.json").write_text(json.dumps({**manifest, "filter": {"split": s.split}, **data_stats, **enc_stats}, indent=2, default=str))
    set_threads(s.threads)
    import torch

    torch.manual_seed(s.seed)
    model = load_model(model_path).to(pick_device())
    model, trainable = prepare_model(model, s)
    log_path = out / "train_log.jsonl"
    log_f = log_path.open("w")

    def on_log(rec):
        log_f.write(json.dumps(rec) + "\n")
        log_f.flush()

    settings = {k: v for k, v in asdict(s).items() if k not in ("extra",)}
    settings["model_path"] = model_path
    (out / "config.json").write_text(json.dumps(settings, indent=2, default=str))
    if console is not None:
        console.print(f"[bold]{s.kind}[/] {run_id}: {len(examples)} conversations, "
                      f"{sum(len(x) for x, _ in examples)} tokens, model {model_label(s.model)} "
                      f"({'full' if s.full else f'LoRA r={s.lora_r}'}, {trainable:,} trainable), device {pick_device()}")
    metrics = _train_with_progress(model, examples, s, tok.pad_token_id, on_log, console)
    log_f.write(json.dumps({"summary": True, **metrics}) + "\n")
    log_f.close()
    # save: LoRA -> adapter/ (adapter weights + tokenizer); full -> model/ (a complete model folder)
    save_dir = out / ("model" if s.full else "adapter")
    model.save_pretrained(save_dir)
    tok.save_pretrained(save_dir)
    plot = write_loss_plot(log_path, out / "loss.png", title=f"{run_id} ({model_label(s.model)})") if s.plot else None
    summary = {"run_id": run_id, "kind": s.kind, "status": "completed", "model": model_label(s.model),
               "model_path": model_path, "adapter_path": str(save_dir), "run_dir": str(out), "trainable_params": trainable,
               "full": s.full, "data": source, "loss_plot": str(plot) if plot else None, **metrics,
               "conversations": len(examples)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if s.record_in_lake:
        summary["lake_version"] = record_run(s.lake_root, {
            "run_id": run_id, "kind": s.kind, "status": "completed", "model": summary["model"],
            "adapter_path": str(save_dir.resolve()), "config": settings, "metrics": metrics,
            "manifest": json.loads((out / "manifest.json").read_text()),
            "metadata": {"run_dir": str(out.resolve()), "trainer": "lachesis.sft", "full": s.full}})
    return summary


def _train_with_progress(model, examples, s, pad_id, on_log, console):
    if not s.progress:
        return train_loop(model, examples, s, pad_id, on_log)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("[bold blue]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False) as prog:
        total = s.max_steps or None
        task = prog.add_task("train", total=total, info="")

        def cb(step, total_steps, rec):
            upd = {"completed": step}
            if s.time_budget_s and not s.max_steps:
                upd["total"] = None
            else:
                upd["total"] = total_steps
            if rec:
                upd["info"] = f"loss {rec['loss']:.3f} · {rec['tokens_per_s']:.0f} tok/s"
            prog.update(task, **upd)

        return train_loop(model, examples, s, pad_id, on_log, cb)


def write_loss_plot(log_path: Path, png: Path, title: str = "loss") -> Path | None:
    recs = [json.loads(l) for l in Path(log_path).read_text().splitlines() if l.strip()]
    recs = [r for r in recs if "step" in r and "loss" in r]
    if not recs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], lw=1.5)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("train loss (assistant tokens)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return png


def record_run(lake_root: str | None, record: dict) -> int | None:
    """Append one `runs` event; returns the lake version (None when the lake wing is unavailable)."""
    import os

    root = lake_root or os.environ.get("LAKE_ROOT") or "data/lake"
    try:
        from lake import Lake
    except ImportError:
        return None
    lake = Lake.init(root)
    res = lake.append("runs", [record])
    return getattr(res, "version", None)
