"""The forward passes training needs: a causal-LM loss over labelled positions only, logits at chosen positions,
and a batch of suffixes that share one prefix (run once, its KV cache expanded). SFT's loss and GRPO's update use
them; each equals the model's own full forward (tested).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from trainers.modeling.token_columns import MASKED

IGNORE = MASKED  # the label the loss skips: Atropos' mask value, so a `masks` row is a labels row


def decoder(model):
    """The transformer body (LlamaModel) under a causal-LM head, through a peft wrapper if any."""
    from peft import PeftModel

    return (model.get_base_model() if isinstance(model, PeftModel) else model).get_decoder()


# model types whose causal-LM head is a plain linear layer on the last hidden state (no logit scaling or
# soft-capping), so applying it to the labelled positions alone gives exactly the model's own logits there
PLAIN_HEAD_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def causal_lm_loss(model, labels, reduction: str = "mean", **inputs):
    """Next-token cross-entropy over the labelled positions (their mean, or their sum with reduction="sum"), as
    `model(**inputs, labels=labels).loss`, with the output layer applied to those positions only. The model's own
    path computes logits at every position over the whole vocabulary, copied several times by the loss, although
    labels cover a fraction of the tokens (the peak it caused: docs/training-notes.md, section 9); same value and
    gradients (tested)."""
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
    hidden = decoder(model)(**inputs).last_hidden_state[:, :-1]
    return model.get_output_embeddings()(hidden[keep])


def label_targets(labels) -> int:
    """How many positions a causal LM loss counts: labelled tokens after the first position (the shift)."""
    return int((labels[:, 1:] != IGNORE).sum())


def shared_prefix_inputs(model, prefix, ids, att) -> dict:
    """The forward arguments of a batch of suffixes `ids` (right padded) whose rows share `prefix`: the prefix runs
    once (batch 1) and its KV cache is expanded to the batch; gradients flow through it (SFT's loss, GRPO's update)."""
    B, S = ids.shape
    P = prefix.shape[1]
    out = decoder(model)(input_ids=prefix, use_cache=True)
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
