"""Model resolution and loading: the cached tiny Llama, local paths, hub ids and the `hermes-3` alias.

`--model tiny` builds (once, then cached) a 2-layer / hidden-128 Llama with GQA (4 heads, 2 KV heads) and a
~1k-token byte-level BPE tokenizer (digits split one per token) trained on the *train* split of the
environments' task text plus skill text, never on test text (../docs/learnability.md: this is the setting in
which a from-scratch model learns to copy unseen names). Both are written with save_pretrained and every caller
loads them through from_pretrained, so the real loading path always runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import string
from pathlib import Path
from typing import Iterable

from .chat import CHATML_TEMPLATE, SPECIAL_TOKENS, TINY_TEMPLATE, TOOL_TOKENS, has_generation_markers
from .config import cache_dir, load_dtype, quiet_transformers, setup_env
from .errors import TrainerInputError
from .pretrained import SMOLLM2_NAMES, smollm2_path

ALIASES = {"hermes-3": "NousResearch/Hermes-3-Llama-3.1-8B", "hermes3": "NousResearch/Hermes-3-Llama-3.1-8B"}
TINY_NAMES = ("tiny", "tiny-llama")
TINY_VERSION = 3  # bump when the recipe below changes: the cache key includes it
TINY_CONFIG = dict(layers=2, hidden=128, heads=4, kv_heads=2, vocab=1024, max_positions=4096)
TINY_MARKER = "lachesis_tiny.json"  # written beside a tiny model: how trained_from_scratch knows one
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


# ----------------------------------------------------------------------------------------------- tiny model corpus
def _env_train_texts() -> tuple[list[str], dict]:
    """Text of every registered environment's train split: instructions, workspace files, reference actions, tools."""
    texts: list[str] = []
    info: dict = {"envs": {}, "splits": ["train"]}
    try:
        import envs  # noqa: F401  (gymnasium only, no torch)
    except Exception as exc:  # envs wing missing or broken: the tokenizer still builds from the generic corpus
        info["envs_error"] = f"{type(exc).__name__}: {exc}"
        return texts, info
    names = _env_names()
    for name in names:
        try:
            tasks = envs.load_tasks(name, "train")
        except Exception as exc:
            info["envs"][name] = f"error: {exc}"
            continue
        n = 0
        system_prompt = ""
        for t in tasks:
            t = t if isinstance(t, dict) else getattr(t, "__dict__", {})
            for key in ("instruction", "prompt", "description"):
                if isinstance(t.get(key), str):
                    texts.append(t[key])
            for path, content in (t.get("files") or {}).items():
                texts.append(str(path))
                if isinstance(content, str):
                    texts.append(content[:4000])
            if t.get("solution") is not None:
                texts.append(json.dumps(t["solution"], ensure_ascii=False))
            n += 1
        info["envs"][name] = n
        try:  # the tool schemas and first observation of one train episode: the prompt text the model will see
            env = envs.make(name)
            obs, rinfo = env.reset(seed=0, options={"task_id": _task_id(tasks[0])} if tasks else None)
            texts.append(str(obs))
            if rinfo.get("tools"):
                texts.append(json.dumps(rinfo["tools"], ensure_ascii=False))
                for tl in rinfo["tools"]:
                    f = tl.get("function", tl)
                    args = ", ".join((f.get("parameters") or {}).get("properties", {}))
                    texts.extend([f"Tools:\n<tools>\n{f.get('name')}({args}) {f.get('description', '')}\n</tools>"] * 20)
            system_prompt = str(rinfo.get("system_prompt") or "")
            env.close()
        except Exception:
            pass
        texts.extend(_chat_scaffold(tasks[:300], system_prompt))
    return texts, info


def _chat_scaffold(tasks, system_prompt: str) -> list[str]:
    """Train tasks as conversation text without the special tokens (roles, tool-call JSON, tool turns), so the
    vocabulary has merges for the chat format itself ("assistant", '{"name": "run", "arguments": {'...)."""
    out = []
    for t in tasks:
        t = t if isinstance(t, dict) else getattr(t, "__dict__", {})
        calls = "".join("<tool_call>\n" + json.dumps({"name": c.get("name"), "arguments": c.get("arguments", {})},
                                                      ensure_ascii=False) + "\n</tool_call>"
                        for c in (t.get("solution") or []) if isinstance(c, dict))
        out.append(f"system\n{system_prompt}\nuser\n{t.get('instruction', '')}\nassistant\n{calls}\n"
                   "tool\n<tool_response>\n(no output)\n</tool_response>\nassistant\n"
                   '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>\n')
    return out


def _task_id(t) -> str | None:
    return t.get("task_id") if isinstance(t, dict) else getattr(t, "task_id", None)


def _env_names() -> list[str]:
    import envs

    for attr in ("list_envs", "list_environments", "names"):
        fn = getattr(envs, attr, None)
        if callable(fn):
            try:
                out = fn()
                return [o if isinstance(o, str) else (o.get("name") if isinstance(o, dict) else getattr(o, "name")) for o in out]
            except Exception:
                pass
    return ["python_debug_env", "bash_exec_env", "git_repo_env"]


SKILL_TEXT_BUDGET = 100_000  # characters: enough for the words of skill documents, not enough to crowd out task text


def _skill_texts() -> list[str]:
    """Sample skill documents: SKILL.md files under skills/ or samples/skills, else the vendored Hermes skill
    corpus (tests/data/hermes_skills_*.tar.gz) when the checkout has it. Capped at SKILL_TEXT_BUDGET characters."""
    repo = Path(__file__).resolve().parent.parent
    texts: list[str] = []
    used = 0
    for root in (repo / "skills", repo / "samples" / "skills"):
        if root.is_dir():
            for p in sorted(root.rglob("SKILL.md")):
                if used >= SKILL_TEXT_BUDGET:
                    return texts
                t = p.read_text(errors="replace")[:4000]
                texts.append(t)
                used += len(t)
    if texts:
        return texts
    import tarfile

    for tgz in sorted((repo / "tests" / "data").glob("hermes_skills_*.tar.gz")):
        try:
            with tarfile.open(tgz) as tf:
                for m in sorted(tf.getmembers(), key=lambda m: m.name):
                    if used >= SKILL_TEXT_BUDGET:
                        return texts
                    if m.isfile() and m.name.endswith("SKILL.md"):
                        t = tf.extractfile(m).read().decode("utf-8", "replace")[:4000]
                        texts.append(t)
                        used += len(t)
        except (OSError, tarfile.TarError):
            continue
    return texts


def _generic_texts(seed: int = 0) -> list[str]:
    """Chat scaffolding and a little shell/python/git text so the vocabulary covers the format itself."""
    rng = random.Random(seed)
    words = ("file list print return def import class value error fix bug test run commit branch merge folder "
             "count lines create move copy archive find replace word directory output result submit").split()
    out = [CHATML_TEMPLATE, TINY_TEMPLATE, "You are a helpful assistant that uses tools.", '{"name": "run", "arguments": {"command": "ls"}}']
    for _ in range(300):
        a = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))
        out.append(f"{rng.choice(words)} {a}.{rng.choice(['txt', 'py', 'md', 'csv', 'json', 'log'])} {rng.randint(0, 999)}")
    return out


def tiny_corpus() -> tuple[list[str], dict]:
    env_texts, info = _env_train_texts()
    skills = _skill_texts()
    info["n_env_texts"], info["n_skill_texts"] = len(env_texts), len(skills)
    return _generic_texts() + env_texts + skills, info


# ----------------------------------------------------------------------------------------------- tiny model build
def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",  # generation pads left; must be a constructor argument or save_pretrained drops it
    )
    hf.add_tokens(TOOL_TOKENS)  # atomic but not special: decode(skip_special_tokens=True) keeps them
    hf.chat_template = TINY_TEMPLATE  # compact tool signatures (chat.py explains why); same turns and tool calls
    return hf


def build_tiny_model(tok, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = TINY_CONFIG
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=c["hidden"],
        intermediate_size=c["hidden"] * 2,
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"],
        max_position_embeddings=c["max_positions"],
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    return model


def tiny_model_path(rebuild: bool = False, root: Path | None = None) -> Path:
    """The cached tiny model's folder; built on first use (a few seconds) and keyed by recipe + corpus hash."""
    texts, info = tiny_corpus()
    h = hashlib.sha256(json.dumps([TINY_VERSION, TINY_CONFIG, texts], ensure_ascii=False).encode()).hexdigest()[:12]
    path = (root or cache_dir() / "models") / f"tiny-llama-{h}"
    if (path / "config.json").exists() and (path / "model.safetensors").exists() and not rebuild:
        return path
    setup_env()
    quiet_transformers()
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tok = build_tokenizer(texts, TINY_CONFIG["vocab"])
    model = build_tiny_model(tok)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    meta = {"recipe_version": TINY_VERSION, "config": TINY_CONFIG, "corpus_sha": h, "n_texts": len(texts), **info,
            "note": "tokenizer trained on train-split task text and skill text only"}
    (tmp / TINY_MARKER).write_text(json.dumps(meta, indent=2))
    try:
        os.replace(tmp, path)
    except OSError:  # another process won the race: use its copy
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


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
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover
        raise TrainerInputError(how) from exc
    try:  # the local cache first: no network call at all when it is there
        path = snapshot_download(repo_id, local_files_only=True, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"])
    except Exception:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false") or os.environ.get("TRANSFORMERS_OFFLINE", "0") not in ("0", "", "false")
        if offline:
            raise TrainerInputError(how + " (HF_HUB_OFFLINE is set)") from None
        try:
            path = snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"])
        except Exception as exc:
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
    except Exception as exc:
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


def load_model(path: str, adapter: str | None = None, trainable: bool = False, dtype=None):
    """AutoModelForCausalLM.from_pretrained in float32 on CPU (a checkpoint's bf16 is not kept there); optional adapter."""
    setup_env()
    quiet_transformers()
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or load_dtype())
    except Exception as exc:
        raise TrainerInputError(f"cannot load model weights from {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if adapter:
        ap = Path(adapter).expanduser()
        if not (ap / "adapter_config.json").exists():
            if (ap / "config.json").exists() and any((ap / w).exists() for w in WEIGHT_FILES):
                # a fully fine-tuned model saved by --full: it replaces the base
                return load_model(str(ap), None, trainable, dtype)
            raise TrainerInputError(f"adapter folder {ap} has no adapter_config.json: pass the run folder's adapter/ directory")
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(ap), is_trainable=trainable)
    return model


def resolve_adapter(adapter: str | None) -> str | None:
    """A run folder or its adapter/ (or model/) subfolder."""
    if not adapter:
        return None
    p = Path(adapter).expanduser()
    if not p.exists():
        raise TrainerInputError(f"adapter {p} does not exist: pass a run folder from rl_finetune_supervised or its adapter/")
    for sub in ("adapter", "model"):
        if (p / sub).is_dir() and not (p / "adapter_config.json").exists() and not (p / "config.json").exists():
            return str(p / sub)
    return str(p)


def trained_from_scratch(model_path: str) -> bool:
    """A model we initialised randomly (the tiny model, or a full fine-tune of it), not a pretrained one: it gets
    full fine-tuning by default, since LoRA on a random base cannot learn."""
    return (Path(model_path) / TINY_MARKER).is_file()


def model_label(spec: str) -> str:
    return "tiny" if spec.lower() in TINY_NAMES else ALIASES.get(spec.lower(), spec)
