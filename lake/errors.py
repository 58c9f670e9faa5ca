"""The lake's one user-facing error type, in its own module so that every lake module can raise it, and what a lake
append can fail with (LAKE_ERRORS: what a writer that must not die on a lake hiccup catches)."""
from __future__ import annotations

import pyarrow as pa
from deltalake.exceptions import DeltaError

from ground.errors import UserError

# What a lake append can fail with (Delta log, storage, the writer's sequence check, the Arrow envelope).
LAKE_ERRORS = (DeltaError, OSError, RuntimeError, pa.ArrowException)


class LakeError(UserError, RuntimeError):
    """A lake-level problem a user can act on (missing lake, unknown table, bad version, bad --as-of)."""


class NoLakeError(LakeError):
    """No lake at a root. The one message every command gives for it names the ways out: --lake, `lake init`, and
    the command's own when it has one (`or_else`, e.g. "pass --no-lake")."""

    def __init__(self, root: str, or_else: str | None = None):
        self.root = root
        ways = ["pass --lake with an existing lake", f"create one with `lake init --lake {root}`"]
        ways += [or_else] if or_else else []
        super().__init__(f"no lake at {root}: {', '.join(ways[:-1])} or {ways[-1]}")
