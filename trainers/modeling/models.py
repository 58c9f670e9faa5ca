"""Model resolution and loading: the tiny model (its recipe is tiny.py), SmolLM2 (pretrained.py), local paths,
hub ids and the `hermes-3` alias, resolved to a folder; the tokenizer (checked for a chat template that masks
assistant tokens), the model and a run's adapter loaded from it.
"""
from __future__ import annotations

import os
from pathlib import Path

from safetensors import SafetensorError

from trainers.modeling.chat import CHATML_TEMPLATE, has_generation_markers
from trainers.modeling.pretrained import SMOLLM2_NAMES, smollm2_path
from trainers.modeling.tiny import TINY_NAMES, tiny_model_path
from trainers.runtime.device import load_dtype, quiet_transformers, setup_env
from trainers.runtime.device import device as pick_device
from trainers.runtime.errors import TrainerInputError
from trainers.runtime.model_folder import WEIGHT_FILES, adapter_base, adapter_base_differs, is_model_folder
from trainers.runtime.run_reader import RunReader

ALIASES = {"hermes-3": "NousResearch/Hermes-3-Llama-3.1-8B", "hermes3": "NousResearch/Hermes-3-Llama-3.1-8B"}
# what a broken or foreign model/tokenizer folder raises inside from_pretrained: missing files, bad JSON, unknown
# architectures, shape mismatches, a truncated safetensors file
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError)


# ----------------------------------------------------------------------------------------------- resolution + loading
def resolve_model(spec: str) -> str:
    """A local folder (str path) or a hub id, after aliases; `tiny` builds/caches the tiny model."""
    spec = (spec or "").strip()
    if not spec:
        raise TrainerInputError("no model given: pass --model tiny, --model hermes-3, a local folder or a hub id")
    if spec.lower() in TINY_NAMES:
        return str(tiny_model_path())
    if spec.lower() in SMOLLM2_NAMES:
        return str(smollm2_path())
    spec = ALIASES.get(spec.lower(), spec)
    p = Path(spec).expanduser()
    if p.exists():
        if not p.is_dir():
            raise TrainerInputError(f"model path {p} is a file; pass the folder that holds config.json and the weights")
        if (p / "adapter_config.json").exists() and not (p / "config.json").exists():
            raise TrainerInputError(
                f"{p} is a LoRA adapter, not a model: pass the base model as --model and the adapter as --adapter {p}")
        if not (p / "config.json").exists():
            raise TrainerInputError(f"model folder {p} has no config.json: save the model there with save_pretrained")
        if not any((p / w).exists() for w in WEIGHT_FILES):
            raise TrainerInputError(
                f"model folder {p} has no weights (model.safetensors or pytorch_model.bin): save them with "
                f"model.save_pretrained(folder) or download them with `hf download <repo> --local-dir {p}`")
        return str(p)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise TrainerInputError(f"model path {spec} does not exist: pass an existing folder, a hub id or `tiny`")
    return _hub_snapshot(spec)


def _hub_snapshot(repo_id: str) -> str:
    """The local snapshot of a hub model; offline (or no network) and not cached -> a one-line how-to."""
    how = (f"model {repo_id} is not available locally: download it with `hf download {repo_id}` (needs network and, "
           f"for gated models, `hf auth login`), or pass --model PATH to a local copy, or --model tiny")
    from httpx import HTTPError
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"]
    try:  # the local cache first: no network call at all when it is there
        path = snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns)
    except LocalEntryNotFoundError:
        offline = any(os.environ.get(v, "0") not in ("0", "", "false") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
        if offline:
            raise TrainerInputError(how + " (HF_HUB_OFFLINE is set)") from None
        try:
            path = snapshot_download(repo_id, allow_patterns=patterns)
        except (OSError, HTTPError) as exc:  # every hub error is an OSError; httpx's transport errors are not
            raise TrainerInputError(how + f" ({type(exc).__name__})") from None
    if not any((Path(path) / w).exists() for w in WEIGHT_FILES):
        raise TrainerInputError(how + " (the cached snapshot has no weights)")
    return path


def load_tokenizer(path: str, chat_template: str | None = None):
    """The tokenizer, checked for a chat template that can mask assistant tokens.

    `chat_template`: None = the tokenizer's own; "chatml" = ours (Hermes-style, with generation markers), also used
    automatically for a ChatML template without markers (Hermes-3's own); a file path = that Jinja file.
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except LOAD_ERRORS as exc:
        raise TrainerInputError(f"cannot load a tokenizer from {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if chat_template:
        if chat_template.lower() in ("chatml", "hermes"):
            tok.chat_template = CHATML_TEMPLATE
        else:
            p = Path(chat_template).expanduser()
            if not p.is_file():
                raise TrainerInputError(f"chat template file {p} not found: pass --chat-template chatml or a .jinja file")
            tok.chat_template = p.read_text()
    tmpl = tok.chat_template if isinstance(tok.chat_template, str) else None
    if not tmpl:
        raise TrainerInputError(
            f"the tokenizer at {path} has no chat template: add chat_template.jinja to the folder "
            "or pass --chat-template chatml (Hermes-style ChatML with generation markers)")
    if not has_generation_markers(tmpl):
        if "<|im_start|>" in tmpl:
            tok.chat_template = CHATML_TEMPLATE  # Hermes-3 is ChatML: same text, plus the markers for the loss mask
        else:
            raise TrainerInputError(
                f"the chat template of {path} has no {{% generation %}} markers, so assistant tokens cannot be masked: "
                "pass --chat-template chatml or a template with {% generation %}...{% endgeneration %}")
    for t in ("<|im_start|>", "<|im_end|>"):
        if t in tok.chat_template and tok.convert_tokens_to_ids(t) in (None, tok.unk_token_id):
            raise TrainerInputError(f"the tokenizer at {path} has no {t} token but its chat template uses it")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, adapter: str | None = None, trainable: bool = False, dtype=None, device=None):
    """AutoModelForCausalLM.from_pretrained onto `device` (a torch device; default auto), in float32 on a CPU (a
    checkpoint's bf16 is not kept there) and bf16 on a GPU that has it. `adapter` (a run folder, see
    resolve_adapter): a LoRA adapter is put on the base; a fully fine-tuned model replaces it."""
    setup_env()
    quiet_transformers()
    from transformers import AutoModelForCausalLM

    adapter = resolve_adapter(adapter)
    if adapter and is_model_folder(Path(adapter)) and not (Path(adapter) / "adapter_config.json").exists():
        path, adapter = adapter, None
    other = adapter_base_differs(adapter, path) if adapter else None
    if other:  # the same shapes with other weights loads without a word and answers nonsense
        raise TrainerInputError(f"the adapter {adapter} was trained on {other}, not on {path}: give that model "
                                "with --model (or leave --model out to use the run's own)")
    dev = device if device is not None else pick_device()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or load_dtype(dev))
    except LOAD_ERRORS as exc:
        raise TrainerInputError(f"cannot load model weights from {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if adapter:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, adapter, is_trainable=trainable)
        except RuntimeError as exc:  # torch's load_state_dict: "size mismatch for ...", 80 lines of it
            if "size mismatch" not in str(exc):
                raise
            raise TrainerInputError(f"the adapter {adapter} was trained on {adapter_base(adapter) or 'another model'}, not on {path}: "
                                    "give that model with --model (or leave --model out to use the run's own)") from None
    return model.to(dev)


def checkpoint_activations(model) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (--gradient-checkpointing):
    long sequences then fit in far less memory, with the same loss and gradients, and on a CPU no slower: the
    second forward costs less than the memory traffic it saves (docs/training-notes.md, "Figures behind the code").
    Only in train mode: generation keeps its KV cache. Non-reentrant: a LoRA model's frozen inputs need not
    require grad. (transformers 5.23 named it activation_checkpointing_enable, gradient_checkpointing_enable before.)"""
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def resolve_adapter(adapter: str | None) -> str | None:
    """What `--adapter` names, as the folder to load (RunReader.weights): a run folder's adapter/ (LoRA) or model/
    (full fine-tuning), a checkpoint's weights, a trainer folder's newest checkpoint, or an adapter or model folder
    as it is."""
    if not adapter:
        return None
    return str(RunReader.open(adapter, "--adapter").weights()[0])


def untrained_note(model: str, start_flag: str, start: str | None) -> str | None:
    """The one line a guide command prints when it starts from the untrained tiny model (random weights, the
    default --model) with no run to start from: otherwise its zero success reads like a broken command."""
    if start or model.lower() not in TINY_NAMES:
        return None
    return (f"--model tiny is untrained (random weights) and makes no valid tool call until fine-tuned: give "
            f"{start_flag} runs/<run> (rl_finetune_supervised) or --model smollm2 (pretrained)")


def model_label(spec: str) -> str:
    """The name a run records for --model: the alias (tiny, smollm2) or the hub id / path as given."""
    if spec.lower() in TINY_NAMES:
        return "tiny"
    if spec.lower() in SMOLLM2_NAMES:
        return "smollm2"
    return ALIASES.get(spec.lower(), spec)
