"""A file's sha256, read in chunks (a multi-GB weights file never sits in memory whole)."""
from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike) -> str:
    """The hex sha256 of the file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
