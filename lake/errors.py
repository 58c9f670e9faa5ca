"""The lake's one user-facing error type, in its own module so that every lake module can raise it."""
from __future__ import annotations


class LakeError(RuntimeError):
    """A lake-level problem a user can act on (missing lake, unknown table, bad version, bad --as-of)."""
