"""A merged Llama-architecture model as one GGUF file for llama.cpp and ollama (`lake export-model --format gguf`).

Why here: the `gguf` package (0.19, installed for reading SmolLM2's GGUF) writes the container, names tensors
(`TensorNameMap`) and reads a Hugging Face tokenizer's merges, special tokens and chat template (`SpecialVocab`),
but its Hugging Face -> GGUF converter is llama.cpp's convert_hf_to_gguf.py, which is on no package registry. For
the one architecture the project trains (Llama: the tiny model, SmolLM2, Hermes-3) the conversion is what that
script does: the hyperparameters as `llama.*` keys, the byte-level BPE vocabulary as `tokenizer.ggml.*` (model
gpt2; the pre-tokenizer by name: GPT-2's byte-level split is llama.cpp's "default", the same with digits split one
by one (the tiny model's) its "smollm"; any other is refused rather than written wrong), the tensors renamed and q_proj/k_proj rows permuted into llama.cpp's rotary layout
(transformers' GGUF reader undoes exactly that permutation). Checked by loading the file back with transformers'
`from_pretrained(gguf_file=...)`: the same logits as the merged folder (tests/test_export_model.py). Other
architectures are refused with the llama.cpp command. F32, or F16 for the matrices (`--dtype float16`).
"""
from __future__ import annotations

from pathlib import Path

from trainers.runtime.errors import TrainerInputError

GGUF_NAME = "model.gguf"
TOOL = "`python convert_hf_to_gguf.py DIR --outtype f16` from a llama.cpp checkout on the --format merged folder"


def _permute(w, n_head: int, n_head_kv: int):
    """q/k rows from Hugging Face's rotate-half order into llama.cpp's interleaved pairs (convert_hf_to_gguf)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _pre_tokenizer(folder: Path) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenization (tokenizer.json), or a one-line refusal."""
    import json

    pre = json.loads((Path(folder) / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [(st.get("type"), st.get("individual_digits"), st.get("use_regex")) for st in steps]
    if kinds == [("ByteLevel", None, True)]:
        return "default"
    if kinds == [("Digits", True, None), ("ByteLevel", None, True)]:
        return "smollm"
    raise TrainerInputError(f"--format gguf: the tokenizer's pre-tokenizer ({[k[0] for k in kinds]}) has no llama.cpp "
                            f"name here: run {TOOL}")


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}  # transformers 5 keeps it there
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or getattr(cfg, "rope_theta", None) or 10000.0)


def write_gguf(folder: Path, model, tok, dest: Path, f16: bool = False) -> None:
    """Write `model` (a merged, plain transformers model saved in `folder` with its tokenizer) to `dest`."""
    import gguf
    import numpy as np

    cfg = model.config
    if cfg.model_type != "llama":
        raise TrainerInputError(f"--format gguf writes Llama-architecture models; this one is {cfg.model_type!r}: "
                                f"run {TOOL}")
    scaling = getattr(cfg, "rope_scaling", None)
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise TrainerInputError(f"--format gguf: rope scaling {scaling.get('rope_type')!r} is not written here: run {TOOL}")
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    w = gguf.GGUFWriter(str(dest), "llama")
    w.add_name(Path(folder).name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(head_dim)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)

    special = set(tok.all_special_ids)
    added = set(tok.get_added_vocab().values())
    tokens, types = [], []
    for i in range(cfg.vocab_size):  # rows of the embedding the tokenizer has no token for: unused padding
        t = tok.convert_ids_to_tokens(i) if i < len(tok) else None
        tokens.append(t if t is not None else f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED if t is None else gguf.TokenType.CONTROL if i in special
                     else gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(_pre_tokenizer(folder))
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True, n_vocab=cfg.vocab_size).add_to_gguf(w, quiet=True)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    state = model.state_dict()
    tied = getattr(cfg, "tie_word_embeddings", False)
    for key, tensor in state.items():
        if key == "lm_head.weight" and tied:  # llama.cpp reads token_embd when output is absent
            continue
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise TrainerInputError(f"--format gguf: no GGUF name for tensor {key}: run {TOOL}")
        data = tensor.detach().float().cpu().numpy()
        if key.endswith("q_proj.weight"):
            data = _permute(data, n_head, n_head)
        elif key.endswith("k_proj.weight"):
            data = _permute(data, n_head, n_kv)
        w.add_tensor(name, data.astype(np.float16 if f16 and data.ndim == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
