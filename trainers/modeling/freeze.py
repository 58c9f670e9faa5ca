"""Layer freezing for cross-task transfer (rl_transfer_init / rl_train_transfer), and the checksums that prove it.

Freezing "layers 0-8" means: the input embeddings and decoder layers 0..8 do not move. Two mechanisms, one per
training mode (docs/training-notes.md, B4):
- full fine-tuning: `requires_grad_(False)` on those parameters (the optimizer never sees them);
- LoRA: no adapter on those layers at all (peft `layers_to_transform` = the other layers); the base weights are
  frozen by LoRA anyway, so the frozen layers get neither an update nor a low-rank delta.

Either way the frozen tensors are hashed (sha256 of their bytes) before and after training and both lists go
into the run folder, so "bit-identical" is a checked fact of every transfer run, not a promise.
"""
from __future__ import annotations

import hashlib
import re

from trainers.runtime.errors import TrainerInputError

LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def base_model(model):
    """The transformers model under a peft wrapper (or the model itself)."""
    from peft import PeftModel

    return model.get_base_model() if isinstance(model, PeftModel) else model


def model_depth(model) -> int:
    """Decoder layers of a causal LM (config.num_hidden_layers)."""
    return int(base_model(model).config.num_hidden_layers)


def check_layers(layers: list[int], depth: int, spec: str) -> list[int]:
    """The sorted layer indices, or the one-line error naming the model's depth."""
    bad = [i for i in layers if not 0 <= i < depth]
    if bad:
        raise TrainerInputError(f"--freeze_layers {spec} is out of range: the model has {depth} layers "
                                f"(0-{depth - 1}); layer {bad[0]} does not exist")
    return sorted(set(layers))


def layer_of(name: str) -> int | None:
    """The decoder layer a parameter name belongs to, or None (embeddings, final norm, head)."""
    m = LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def frozen_names(model, layers: list[int]) -> list[str]:
    """Names of the parameters a freeze of `layers` covers: the input embeddings and every tensor of those layers
    (LoRA tensors included when a peft model has any there, which a correct transfer setup never does)."""
    emb = {id(p) for p in base_model(model).get_input_embeddings().parameters()}
    keep = set(layers)
    return [n for n, p in model.named_parameters() if id(p) in emb or layer_of(n) in keep]


def freeze_full(model, layers: list[int]) -> list[str]:
    """Full fine-tuning: requires_grad False on the embeddings and `layers`. Returns the frozen names."""
    names = frozen_names(model, layers)
    params = dict(model.named_parameters())
    for n in names:
        params[n].requires_grad_(False)
    return names


def lora_layers(depth: int, frozen: list[int]) -> list[int]:
    """The layers that get a LoRA adapter: every layer not frozen."""
    return [i for i in range(depth) if i not in set(frozen)]


def checksums(model, names: list[str] | None = None) -> dict[str, str]:
    """sha256 of each named parameter's bytes (all parameters when names is None)."""
    import torch

    params = dict(model.named_parameters())
    out = {}
    for n in names if names is not None else list(params):
        t = params[n].detach().to("cpu").contiguous()
        out[n] = hashlib.sha256(t.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    return out


def trainable_names(model) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def compare(before: dict[str, str], after: dict[str, str]) -> dict:
    """Which of the hashed tensors changed."""
    changed = sorted(n for n in before if after.get(n) != before[n])
    return {"tensors": len(before), "changed": len(changed), "unchanged": len(before) - len(changed),
            "changed_names": changed}


def freeze_report(frozen_before: dict, frozen_after: dict, trained_before: dict, trained_after: dict,
                  layers: list[int], depth: int, mode: str) -> dict:
    """frozen_checksums.json of a transfer run: both checksum lists and the verdicts."""
    frozen, trained = compare(frozen_before, frozen_after), compare(trained_before, trained_after)
    return {"layers": layers, "depth": depth, "mode": mode, "embeddings_frozen": True,
            "frozen_identical": frozen["changed"] == 0, "frozen_tensors": frozen["tensors"],
            "trained_tensors": trained["tensors"], "trained_changed": trained["changed"],
            "trained_unchanged": sorted(set(trained_before) - set(trained["changed_names"])),
            "frozen_changed": frozen["changed_names"],
            "before": frozen_before, "after": frozen_after}
