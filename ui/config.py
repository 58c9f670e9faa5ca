"""`lake ui`'s typed options: where it listens, who may call it and its HTTP limits are edge's ServerOptions (the
same fields and help texts as `lake serve`'s); the UI adds how long one query may run. Kept free of heavy imports:
the CLI builds its options from this class at start-up (lachesis/console.py `config_command`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edge.errors import OptionError
from edge.options import ServerOptions, server_field
from ground.options import helped
from ground.ranges import positive

MAX_QUERY_TIMEOUT_S = 3600.0
QUERY_TIMEOUT_S = 10.0  # `lake serve` carries the UI with this limit (it has no option of its own for it)
QUERY_MEMORY_MB = 1024.0  # and with this one


@dataclass(kw_only=True)
class UiConfig(ServerOptions):
    """`lake ui`: the read-only web UI and its read API over one lake, alone (no ingest routes)."""

    port: int = server_field("port", 8080)
    query_timeout: float = field(default=QUERY_TIMEOUT_S, **helped(
        "Seconds one query of a page or of the read API may run (a `where` filter included) before it is "
        "interrupted and answered 400: an expensive filter cannot hold a worker."))
    query_memory_mb: float = field(default=QUERY_MEMORY_MB, **helped(
        "Most memory (MiB) one query of a page or of the read API may hold; past it DuckDB spills to a temporary "
        "folder, or the query is stopped and answered with the reason (400; 503 for a trajectory looked up by id). "
        "With the kept trajectory indexes (two, ~150 MB per million trajectories) it bounds the server's memory on "
        "any lake."))
    runs: Optional[Path] = field(default=None, **helped(
        "A folder of run folders (runs/ by default for the trainers): a run's page draws its per-step loss from its "
        "train_log.jsonl when the run's recorded folder is inside it (read without following links, regular files "
        "only). Without it, run pages draw what the lake records (evaluations, increments)."))
    exports: Optional[Path] = field(default=None, **helped(
        "A folder (outside the lake) for the views page's export button: each press runs `lake export VIEW --as-of "
        "PIN` into a new folder of it (the UI's only write; a CSRF token guards the form), and a conversation page "
        "links every export of it whose rows hold that trajectory. Without it, no button and no such links."))
    screenshots: Optional[Path] = field(default=None, **helped(
        "The folder web episodes save their screenshots in (web_form_env's `screenshots`): a conversation page shows "
        "the screenshot its row records (metadata.checks.details[0].screenshot) when that file, links resolved, is a "
        ".png inside this folder; any other path is shown as text and never read. Without it, paths as text only."))

    def __post_init__(self):
        positive(self, "query_timeout", error=OptionError)
        positive(self, "query_memory_mb", error=OptionError)
        if self.query_timeout > MAX_QUERY_TIMEOUT_S:  # a timer of inf seconds cannot be set
            raise OptionError(f"--query-timeout must be at most {MAX_QUERY_TIMEOUT_S:g}, got {self.query_timeout}")
        super().__post_init__()
