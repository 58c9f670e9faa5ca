"""What a model folder on disk says about itself: a from-scratch (tiny) model carries a marker file.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ground.digest import file_sha256

TINY_MARKER = "lachesis_tiny.json"  # written beside a tiny model: how trained_from_scratch knows one
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
ADAPTER_CONFIG = "adapter_config.json"  # what makes a folder a LoRA adapter (peft)


def is_model_folder(p: Path) -> bool:
    """A folder from_pretrained loads as a whole model: its config.json and its weights."""
    return (p / "config.json").is_file() and any((p / w).exists() for w in WEIGHT_FILES)


def is_adapter_folder(p: Path) -> bool:
    return (p / ADAPTER_CONFIG).is_file()


def trained_from_scratch(model_path: str) -> bool:
    """A model we initialised randomly (the tiny model, or a full fine-tune of it), not a pretrained one: it gets
    full fine-tuning by default, since LoRA on a random base cannot learn."""
    return (Path(model_path) / TINY_MARKER).is_file()


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
NO_LIMIT = 1_000_000  # tokenizers without a limit say 1e30 (transformers' VERY_LARGE_INTEGER)


def context_length(model_path: str) -> int | None:
    """The tokens the model at `model_path` was built for: config.json's position limit, or the tokenizer's
    model_max_length when that is smaller (and real); None when the folder names neither."""
    found = []
    for name, keys in (("config.json", CONTEXT_KEYS), ("tokenizer_config.json", ("model_max_length",))):
        try:
            cfg = json.loads((Path(model_path) / name).read_text())
        except (OSError, ValueError):
            continue
        values = [cfg.get(k) for k in keys] if isinstance(cfg, dict) else []
        found += [int(v) for v in values if isinstance(v, (int, float)) and 0 < v < NO_LIMIT]
    return min(found) if found else None


def readable_like_created(folder: str | Path) -> None:
    """Give every file of `folder` the mode a newly created file gets under the process umask (0644 under 022).
    Why: transformers writes model.safetensors through a private temporary file (0600) and renames it, so an
    exported or checkpointed model would be the one file of its folder that others cannot read. The mode comes
    from a probe file created the ordinary way: reading the umask itself means setting it, a race with threads."""
    folder = Path(folder)
    probe = folder / ".mode-probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        mode = os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)
        probe.unlink()
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o777 != mode:
            p.chmod(mode)


WEIGHT_SUFFIXES = (".safetensors", ".bin")


def weights_sha256(folder: str | Path) -> str | None:
    """What a recorded call and a `runs` event name a checkpoint by: the sha256 of the folder's weights file
    (adapter_model.safetensors for a LoRA adapter, model.safetensors for a whole model), the hex digest
    `sha256sum FOLDER/adapter_model.safetensors` prints. A model in several weight files gets the sha256 of their
    `sha256sum` lines in name order (`cd FOLDER && sha256sum *.safetensors | sha256sum`). None: no weights file."""
    files = sorted(p.name for p in Path(folder).iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    sums = [f"{file_sha256(Path(folder) / name)}  {name}\n" for name in files]
    if len(sums) == 1:
        return sums[0].split()[0]
    return hashlib.sha256("".join(sums).encode()).hexdigest() if sums else None


def adapter_base(adapter: str | Path) -> str:
    """The base model a LoRA adapter names (adapter_config.json's base_model_name_or_path: the folder or hub id
    peft was given when the adapter was made); "" when it names none or the file does not read."""
    try:
        cfg = json.loads((Path(adapter) / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError):
        return ""
    named = cfg.get("base_model_name_or_path") if isinstance(cfg, dict) else None
    return named if isinstance(named, str) else ""


def adapter_base_differs(adapter: str | Path, base: str) -> str | None:
    """None when the LoRA `adapter` may go on the model folder `base`, else the base it was trained on. The same
    base: the same folder, or a folder whose weights have the same sha256 (a copy). An adapter that names no
    base, or a base that is not a folder here (a hub id, another machine's path), cannot be compared: None, and
    loading it checks the tensors' shapes."""
    named = adapter_base(adapter)
    if not named or named == base or not Path(named).is_dir() or not Path(base).is_dir():
        return None
    if os.path.samefile(named, base) or _identity(Path(named)) == _identity(Path(base)):
        return None
    return named


_identities: dict[tuple, str | None] = {}


def _identity(folder: Path) -> str | None:
    """A model folder's weights_sha256, computed once per folder and weights files' sizes and times (a server
    checks every increment against the same base)."""
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())
                  if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    key = (str(folder.resolve()), stats)
    if key not in _identities:
        _identities[key] = weights_sha256(folder)
    return _identities[key]
