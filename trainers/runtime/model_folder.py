"""What a model folder on disk says about itself: a from-scratch (tiny) model carries a marker file.
"""
from __future__ import annotations

from pathlib import Path

TINY_MARKER = "lachesis_tiny.json"  # written beside a tiny model: how trained_from_scratch knows one


def trained_from_scratch(model_path: str) -> bool:
    """A model we initialised randomly (the tiny model, or a full fine-tune of it), not a pretrained one: it gets
    full fine-tuning by default, since LoRA on a random base cannot learn."""
    return (Path(model_path) / TINY_MARKER).is_file()
