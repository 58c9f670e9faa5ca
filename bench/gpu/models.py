"""The two architectures: a fresh seeded copy with random weights (or real ones from --model-dir), and a
synthetic tokenizer shaped like SmolLM2's."""
from __future__ import annotations

import random

import torch

from gpu.frame import ARCHS, SPECIAL, TOY, Run


class Model:
    """One architecture: how to build a fresh copy of it (random weights, seeded, or from --model-dir)."""

    def __init__(self, run: Run, name: str, path: str | None):
        from transformers import AutoConfig

        self.run, self.name, self.path = run, name, path
        if path:
            self.config = AutoConfig.from_pretrained(path)
            self.tok = _load_tokenizer(path)
            self.kind = f"real weights from {path} ({self.config.model_type})"
        else:
            model_type, label, dims = ARCHS[name]
            dims = {**dims, **TOY} if run.args.quick else dims
            self.config = AutoConfig.for_model(model_type, **dims)
            self.tok = synthetic_tokenizer(self.config.vocab_size)
            scale = " toy-scaled (--quick)" if run.args.quick else ""
            self.kind = (f"random weights, {label}'s architecture{scale} ({type(self.config).__name__}: hidden "
                         f"{dims['hidden_size']}, {dims['num_hidden_layers']} layers, {dims['num_attention_heads']} "
                         f"heads, {dims['num_key_value_heads']} kv heads, intermediate {dims['intermediate_size']}, "
                         f"vocab {dims['vocab_size']})")
        self.weights = "real" if path else "random"
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(self.eos, int) or self.eos == self.tok.unk_token_id:
            self.eos = self.tok.eos_token_id
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self.vocab = int(self.config.vocab_size)

    def build(self):
        """A fresh copy on the device in the run's dtype (seeded: every copy of a random model is the same)."""
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        if self.path:
            return AutoModelForCausalLM.from_pretrained(self.path, dtype=self.run.dtype).to(self.run.dev)
        with torch.device(self.run.dev):  # made where it runs: a 1.5B model is not initialised on the CPU first
            model = AutoModelForCausalLM.from_config(self.config, dtype=self.run.dtype)
        return model.to(self.run.dev)

    def ids(self, rng: random.Random, n: int) -> list[int]:
        """n random ordinary token ids (never a special one)."""
        return [rng.randrange(16, self.vocab) for _ in range(n)]


def synthetic_tokenizer(vocab_size: int):
    """A word-level tokenizer of `vocab_size` tokens whose first three are SmolLM2's special tokens: what the
    trainers and TRL ask of a tokenizer (pad and end-of-turn ids, a vocabulary) when no weights are on disk."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(len(SPECIAL), vocab_size)}
    vocab.update({s: i for i, s in enumerate(SPECIAL)})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL[0]))
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=SPECIAL[0], unk_token=SPECIAL[0],
                                   bos_token=SPECIAL[1], eos_token=SPECIAL[2])


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


