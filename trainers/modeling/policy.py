"""The policy an online or transfer run trains: which weights it starts from, LoRA or full, which layers freeze.

One function builds it for a fresh run and for a resumed one, so a resumed run has exactly the structure the
stopped one had (the same adapter placement, the same frozen tensors):

- base: `--model` (tiny | smollm2 | a folder | a hub id), or the fully fine-tuned model of an `--init` run folder;
- mode: full fine-tuning for a model trained from scratch (tiny and its fine-tuned copies), LoRA for a
  pretrained one (trainers/sft/config.py's rule: LoRA on a random base cannot learn);
- adapter: an `--init` run's LoRA adapter is trained on (for a full fine-tune it is merged into the weights);
  without one a new adapter goes on every layer, or with frozen layers only on the others (peft
  `layers_to_transform`: no adapter on a frozen layer);
- freezing (transfer): the input embeddings and the named layers get requires_grad False, including the tensors
  a continued adapter has in those layers, so they keep what the source run learnt there, unchanged;
- checkpoint weights, when resuming: the saved model (full) or adapter (LoRA) replaces the starting one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainers.modeling.freeze import check_layers, freeze_full, layer_of, lora_layers, model_depth
from trainers.modeling.models import is_model_folder, load_model, load_tokenizer, resolve_adapter, resolve_model
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import trained_from_scratch
from trainers.runtime.run_reader import RunReader


@dataclass
class PolicySpec:
    """Where the policy comes from; recorded in the run's config.json and enough to rebuild it on resume."""

    model_path: str  # the base model folder (resolved)
    init_weights: str | None = None  # an --init run's adapter/ or model/ folder
    full: bool = True
    freeze: bool = False  # transfer: the embeddings and `layers` do not train
    layers: list[int] = field(default_factory=list)  # the frozen decoder layers
    lora_rank: int = 16
    lora_alpha: int = 32

    @property
    def init_adapter(self) -> str | None:
        """The init run's LoRA adapter (None when the init run saved a whole model)."""
        w = self.init_weights
        return w if w and not is_model_folder(Path(w)) else None

    @property
    def base(self) -> str:
        w = self.init_weights
        return w if w and is_model_folder(Path(w)) else self.model_path

    @property
    def tokenizer_path(self) -> str:
        w = self.init_weights
        return w if w and (Path(w) / "tokenizer_config.json").is_file() else self.model_path


def resolve_spec(model: str, init: str | None, lora_rank: int, lora_alpha: int, freeze: list[int] | None = None,
                 full: bool | None = None) -> PolicySpec:
    """The PolicySpec of a new run: --model resolved, --init run folder resolved to its adapter/ or model/;
    `freeze` (transfer): the layers frozen with the embeddings (None: nothing is frozen)."""
    init_weights = resolve_adapter(init) if init else None
    model_path = init_base_model(init) if init and not is_model_folder(Path(init_weights)) else resolve_model(model)
    base = init_weights if init_weights and is_model_folder(Path(init_weights)) else model_path
    mode = trained_from_scratch(base) if full is None else full
    return PolicySpec(model_path=model_path, init_weights=init_weights, full=mode, freeze=freeze is not None,
                      layers=list(freeze or []), lora_rank=lora_rank, lora_alpha=lora_alpha)


def run_base_model(run: str, option: str = "--init") -> tuple[str, str]:
    """(the --model a run folder was trained from as its config.json names it, that model's path): what
    `rl_train_online --init RUN` and `hermes_eval --adapter RUN` start from (the adapter alone is no model)."""
    config = RunReader.open(run, option).config()  # the run folder's, or its adapter/'s run folder's
    if config.get("model_path"):
        return str(config.get("model") or config["model_path"]), resolve_model(config["model_path"])
    raise TrainerInputError(f"{run} holds a LoRA adapter but no config.json naming its base model: pass the run "
                            "folder rl_finetune_supervised wrote (runs/<run_id>), or --model")


def init_base_model(run: str) -> str:
    """The base model of a LoRA run folder: its config.json's model_path."""
    return run_base_model(run)[1]


def _load_full(spec: PolicySpec, weights: str | None, device):
    if weights:
        return load_model(weights, device=device)
    model = load_model(spec.base, spec.init_adapter, device=device)
    return model.merge_and_unload() if spec.init_adapter else model


def _load_lora(spec: PolicySpec, weights: str | None, device):
    from peft import LoraConfig, PeftModel, get_peft_model

    base = load_model(spec.base, device=device)
    adapter = weights or spec.init_adapter
    if adapter:
        return PeftModel.from_pretrained(base, adapter, is_trainable=True)
    depth = model_depth(base)
    train_layers = lora_layers(depth, spec.layers) if spec.freeze else None
    if train_layers == []:
        raise TrainerInputError(f"--freeze_layers {_spec_text(spec.layers)} freezes all {depth} layers: with LoRA "
                                "nothing would train; leave at least one layer out")
    if train_layers is None:
        config = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, target_modules="all-linear",
                            task_type="CAUSAL_LM")
    else:  # peft takes layers_to_transform only with a list of module names, not "all-linear"
        config = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, target_modules=layer_linears(base),
                            task_type="CAUSAL_LM", layers_to_transform=train_layers, layers_pattern="layers")
    return get_peft_model(base, config)


def layer_linears(model) -> list[str]:
    """The names of the linear modules inside the decoder layers (q_proj, ..., down_proj for Llama): what
    "all-linear" means, spelled out."""
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and layer_of(name + ".") is not None})


def build_policy(spec: PolicySpec, weights: str | None = None, device=None):
    """(model, frozen parameter names): the policy of `spec` on `device` (a torch device, default auto), from
    checkpoint `weights` when given."""
    model = _load_full(spec, weights, device) if spec.full else _load_lora(spec, weights, device)
    if not spec.freeze:
        return model, []
    check_layers(spec.layers, model_depth(model), _spec_text(spec.layers))
    frozen = freeze_full(model, spec.layers)
    if not any(p.requires_grad for p in model.parameters()):
        raise TrainerInputError(f"--freeze_layers {_spec_text(spec.layers)} leaves nothing to train: leave at least "
                                "one layer out")
    return model, frozen


def _spec_text(layers: list[int]) -> str:
    return ",".join(str(i) for i in layers)


def spec_depth(spec: PolicySpec) -> int:
    """The decoder depth of the policy's model, from its config.json (no weights loaded)."""
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(spec.base).num_hidden_layers)


def tokenizer_for(spec: PolicySpec):
    return load_tokenizer(spec.tokenizer_path)
