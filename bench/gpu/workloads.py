"""The three measurements, each against its plain baseline in the same run: our SFT step against TRL's
SFTTrainer, our GRPO update with the shared prefix against whole sequences, our batched multi-turn generation
against transformers' generate."""
from __future__ import annotations

import random
import tempfile
import time

import torch

from gpu.frame import Run
from gpu.models import Model
from trainers.generation.generate import Sampling, Turns, reference_generate, use_bf16
from trainers.modeling.forward import IGNORE
from trainers.rl.grpo import SampledSequence, policy_update
from trainers.sft.config import SFTConfig
from trainers.sft.loop import global_batches, lora_config, prepare_model, train_loop


def ratio(a: dict, b: dict) -> float | None:
    x, y = a.get("tokens_per_s"), b.get("tokens_per_s")
    return round(x / y, 3) if x and y else None


def sft_examples(m: Model, z: dict, n: int) -> list[tuple[list[int], list[int]]]:
    """n conversations as (input_ids, labels): a shared system + tools prefix, a user turn, an assistant reply
    (labelled, with its end-of-turn token), a tool result, a second reply (labelled)."""
    rng = random.Random(1)
    prefix = m.ids(rng, z["prefix"])
    out = []
    for _ in range(n):
        ids = prefix + m.ids(rng, rng.randint(z["user"] // 2, z["user"]))
        labels = [IGNORE] * len(ids)
        for part in ("reply", "tool", "reply"):
            toks = m.ids(rng, rng.randint(z[part] // 2, z[part]))
            if part == "reply":
                toks.append(m.eos)
            ids += toks
            labels += toks if part == "reply" else [IGNORE] * len(toks)
        out.append((ids, labels))
    return out


def sft_config(z: dict, device: str) -> SFTConfig:
    return SFTConfig(data="synthetic", max_steps=z["warmup"] + z["steps"], batch_size=z["batch"], learning_rate=2e-4,
                     full=False, warmup_steps=0, seed=0, log_every=1, share_prefix=True, device=device,
                     record_in_lake=False, progress=False, plot=False)


def _window(tokens_at: list[int], times: list[float], warmup: int) -> dict:
    """tokens/s over the steps after the warm-up, from each step's cumulative tokens and end time."""
    tokens = tokens_at[-1] - tokens_at[warmup - 1]
    secs = times[-1] - times[warmup - 1]
    return {"tokens": tokens, "seconds": round(secs, 4), "tokens_per_s": round(tokens / max(secs, 1e-9), 1)}


def sft_ours(run: Run, m: Model, examples, z: dict) -> dict:
    s = sft_config(z, str(run.dev))
    model, trainable = prepare_model(m.build(), s)
    recs: list[dict] = []
    train_loop(model, examples, s, m.pad, on_log=recs.append)  # a step's loss is read back: it ends synchronised
    out = _window([r["tokens"] for r in recs], [r["elapsed_s"] for r in recs], z["warmup"])
    out.update(run.memory(), loss_step1=round(recs[0]["loss"], 4), trainable_parameters=trainable,
               steps_timed=z["steps"], what="trainers.sft.loop.train_loop (LoRA, shared-prefix batches)")
    del model
    return out


def sft_trl(run: Run, m: Model, examples, z: dict) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    TRLConfig, SFTTrainer = run.trl
    s = sft_config(z, str(run.dev))
    n = z["warmup"] + z["steps"]
    batches = [b for _, b in zip(range(n), global_batches(examples, s, 1))]  # ours, in our order
    rows = [examples[i] for b in batches for i in b]
    ds = Dataset.from_list([{"input_ids": x, "labels": y} for x, y in rows])
    kw = dict(output_dir=tempfile.mkdtemp(prefix="gpu_check_trl_"), per_device_train_batch_size=z["batch"],
              max_steps=n, learning_rate=2e-4, warmup_steps=0, logging_steps=1, save_strategy="no",
              report_to="none", bf16=run.dtype == torch.bfloat16, fp16=False, gradient_checkpointing=False,
              dataloader_pin_memory=run.gpu, dataloader_num_workers=0, max_length=max(len(x) for x, _ in rows),
              seed=0, disable_tqdm=True, use_cpu=not run.gpu)
    fields = getattr(TRLConfig, "__dataclass_fields__", {})
    same_order = "train_sampling_strategy" in fields  # transformers >= 5.2: a sequential sampler, our order
    if same_order:
        kw["train_sampling_strategy"] = "sequential"
    cfg = TRLConfig(**kw)

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_train_begin(self, args, state, control, **_):
            run.sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **_):
            run.sync()
            self.times.append(time.perf_counter() - self.t0)

    clock = Clock()
    trainer = SFTTrainer(model=m.build(), args=cfg, train_dataset=ds, processing_class=m.tok,
                         peft_config=lora_config(s), callbacks=[clock])
    trainer.remove_callback(PrinterCallback)  # no log line per step (logging_steps=1 for the first step's loss)
    trainer.train()
    cum, total = [], 0
    for b in batches:
        total += sum(len(examples[i][0]) for i in b)
        cum.append(total)
    out = _window(cum, clock.times, z["warmup"])
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    out.update(run.memory(), loss_step1=round(losses[0], 4) if losses else None, steps_timed=z["steps"],
               batches="the same batches in the same order" if same_order else
               "the same rows in a random order (this transformers has no train_sampling_strategy)",
               what="trl.SFTTrainer, peft_config LoRA r 16 alpha 32 all-linear, bf16 when the GPU has it")
    del trainer
    return out


def sft(run: Run, m: Model) -> dict:
    z = run.sizes["sft"]
    examples = sft_examples(m, z, z["batch"] * (z["warmup"] + z["steps"]))
    res = {"workload": {**z, "rows": len(examples), "mean_tokens_per_row": round(
        sum(len(x) for x, _ in examples) / len(examples), 1)}}
    res["ours"] = run.measure(f"{m.name} sft ours", sft_ours, run, m, examples, z)
    if run.trl is None:
        res["trl"] = {"skipped": run.trl_reason}
        run.skipped.append(f"{m.name} sft trl: {run.trl_reason}")
    else:
        res["trl"] = run.measure(f"{m.name} sft trl", sft_trl, run, m, examples, z)
    res["ratio"] = ratio(res["ours"], res["trl"])
    return res


def grpo_rollouts(m: Model, z: dict) -> list[SampledSequence]:
    """A group of two-turn rollouts of one task: the shared prompt, each rollout's own reply (sampled), the tool's
    result, a second reply (sampled); advantages +1 / -1 so every rollout is trained."""
    rng = random.Random(2)
    prompt = m.ids(rng, z["prefix"]) + m.ids(rng, z["task"])
    out = []
    for g in range(z["group"]):
        ids, mask = list(prompt), [0] * len(prompt)
        for part in ("reply", "tool", "reply"):
            toks = m.ids(rng, rng.randint(z[part] // 2, z[part]))
            if part == "reply":
                toks.append(m.eos)
            ids += toks
            mask += [1 if part == "reply" else 0] * len(toks)
        out.append(SampledSequence(ids, mask, advantage=1.0 if g % 2 == 0 else -1.0))
    return out


def grpo(run: Run, m: Model) -> dict:
    z = run.sizes["grpo"]
    rollouts = grpo_rollouts(m, z)
    res = {"workload": {**z, "tokens_per_update": sum(len(r.ids) for r in rollouts)}}
    state: dict = {}

    def update(share: bool) -> dict:
        if "model" not in state:
            s = sft_config(run.sizes["sft"], str(run.dev))
            state["model"], _ = prepare_model(m.build(), s)
            state["params"] = [p for p in state["model"].parameters() if p.requires_grad]
            state["opt"] = torch.optim.AdamW(state["params"], lr=1e-5)
        model, params, opt = state["model"], state["params"], state["opt"]
        bf16 = use_bf16("auto", run.dev)  # online RL's rule (--bf16 auto): autocast where the device has bf16

        def once():
            stats, _ = policy_update(model, params, opt, rollouts, m.pad, z["micro"], bf16=bf16, share_prefix=share,
                                     tis_cap=0.0)
            run.sync()
            return stats

        for _ in range(z["warmup"]):
            once()
        run.fresh(collect=False)
        t = time.perf_counter()
        tokens = shared = 0
        for _ in range(z["steps"]):
            stats = once()
            tokens += stats.tokens
            shared += stats.shared_tokens
        secs = time.perf_counter() - t
        return {"tokens": tokens, "seconds": round(secs, 4), "tokens_per_s": round(tokens / max(secs, 1e-9), 1),
                **run.memory(), "shared_prefix_tokens": shared, "updates_timed": z["steps"], "autocast_bf16": bf16,
                "what": f"trainers.rl.grpo.policy_update(share_prefix={share})"}

    res["shared_prefix"] = run.measure(f"{m.name} grpo shared prefix", update, True)
    res["whole_sequences"] = run.measure(f"{m.name} grpo whole sequences", update, False)
    state.clear()
    res["ratio"] = ratio(res["shared_prefix"], res["whole_sequences"])
    return res


def episodes(m: Model, z: dict, turns) -> tuple[int, list[list[int]]]:
    """Multi-turn episodes through `turns(prompts) -> replies`: each turn's prompt is the last one + the reply +
    the tool's result (as an environment appends it). (generated tokens, each episode's final ids)."""
    rng = random.Random(3)
    prefix = m.ids(rng, z["prefix"])
    convs = [prefix + m.ids(rng, z["task"]) for _ in range(z["episodes"])]
    generated = 0
    for _ in range(z["turns"]):
        replies = turns(convs)
        generated += sum(len(r) for r in replies)
        convs = [c + r + m.ids(rng, z["tool"]) for c, r in zip(convs, replies)]
    return generated, convs


def generation(run: Run, m: Model) -> dict:
    z = run.sizes["gen"]
    res = {"workload": {**z, "greedy": True}}
    model = None
    try:
        model = m.build().eval()
        finals: dict = {}

        def ours() -> dict:
            def play(zz):
                t = Turns(model, m.tok, Sampling(max_new_tokens=zz["new"]))
                keys = list(range(zz["episodes"]))
                return episodes(m, zz, lambda prompts: [g.token_ids for g in t(prompts, keys)])
            return timed(play, "ours")

        def plain() -> dict:
            def play(zz):
                return episodes(m, zz, lambda prompts: reference_generate(model, m.tok, prompts, zz["new"]))
            return timed(play, "plain")

        def timed(play, key) -> dict:
            play({**z, "episodes": 2, "turns": 1, "new": 2})  # warm-up
            run.fresh(collect=False)
            t = time.perf_counter()
            n, convs = play(z)
            run.sync()
            secs = time.perf_counter() - t
            finals[key] = convs
            what = ("trainers.generation.generate.Turns (shared prefix once, KV cache kept across turns)" if key == "ours"
                    else "transformers generate on the whole conversation each turn (generate.reference_generate)")
            return {"generated_tokens": n, "seconds": round(secs, 4), "tokens_per_s": round(n / max(secs, 1e-9), 1),
                    **run.memory(), "what": what}

        res["ours"] = run.measure(f"{m.name} generation ours", ours)
        res["plain"] = run.measure(f"{m.name} generation plain", plain)
        if "ours" in finals and "plain" in finals:
            same = sum(a == b for a, b in zip(finals["ours"], finals["plain"]))
            res["identical_episodes"] = f"{same}/{len(finals['ours'])}"
    finally:
        model = None  # noqa: F841  (the closures above hold it: freed here, before the next model is built)
        run.fresh()
    res["ratio"] = ratio(res.get("ours", {}), res.get("plain", {}))
    return res


