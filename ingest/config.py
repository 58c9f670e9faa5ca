"""The typed configuration of the ingest commands (`lake serve`, `lake watch`, `lake import`).

One dataclass per command: each field's default and help text are the CLI option's (lachesis.console.option),
and `__post_init__` refuses a bad value with one line. Kept free of heavy imports: the CLI builds its options
from these classes at start-up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edge.errors import OptionError
from edge.options import COMPACT_HELP, MiB, ServerOptions, check_compact_interval, inflate_limit, server_field
from ground.options import helped
from ground.ranges import at_least, positive

# Why these defaults: Atropos groups and Hermes trajectories gzip at about 3-10:1 (JSON token ids and text),
# a gzip bomb at 1000:1 (255 KB of it inflated to 250 MiB of valid JSON and cost the server 2.5 GB); parsed
# JSON takes up to ~10x its size in memory, so 64 MiB per request leaves room for several at once.
RATIO_HELP = ("Largest gunzip ratio beyond the first MiB: N bytes of gzip may inflate to max(1 MiB, ratio x N), "
              "so a gzip bomb (1000:1) stops early while real JSON (3-10:1) passes.")


SERVE_MODES = ("at-least-once", "at-most-once")
FORMATS = ("auto", "hermes", "atropos", "native")


@dataclass(kw_only=True)
class ServeConfig(ServerOptions):
    """`lake serve`: the durable trajectory API (native /v1 routes and the Atropos run-api routes). What it shares
    with `lake serve-model` (where it listens, tokens, Host names, body size, log level, compaction, HTTP limits) is
    edge/options.py's ServerOptions."""

    max_body_mb: float = server_field("max_body_mb", 64.0)
    max_inflated_mb: float = field(default=64.0, **helped(
        "Largest body after gunzip (MiB), whatever its ratio (the gzip-bomb limit, with the ratio)."))
    max_inflate_ratio: float = field(default=100.0, **helped(RATIO_HELP))
    serve_mode: str = field(default="at-least-once", **helped(
        "at-least-once: a batch counts as served once the trainer comes back for the next one; after a crash an "
        "unconfirmed batch is served again. at-most-once: recorded before it is sent; a batch lost in flight is not "
        "re-sent."))
    bind_retry_s: float = field(default=0.0, **helped(
        "Keep trying to bind a port still in use for this long (a standby that takes over when the running server "
        "exits)."))
    fsync: bool = field(default=True, **helped(
        "fsync each commit before its 2xx (power-loss durability). --no-fsync keeps acks safe against a killed "
        "server but not a power loss: for measuring what fsync costs (bench/bench_ingest.py)."))

    def __post_init__(self):
        if self.serve_mode not in SERVE_MODES:
            raise OptionError(f"--serve-mode must be one of {', '.join(SERVE_MODES)}, not {self.serve_mode!r}")
        positive(self, "max_inflated_mb", error=OptionError)
        at_least(self, 1, "max_inflate_ratio", error=OptionError)
        at_least(self, 0, "bind_retry_s", error=OptionError)
        super().__post_init__()

    @property
    def max_inflated(self) -> int:
        return int(self.max_inflated_mb * MiB)

    def inflated_limit(self, compressed: int) -> int:
        """How far a gzip body of `compressed` bytes may inflate (--max-inflated-mb, --max-inflate-ratio)."""
        return inflate_limit(compressed, self.max_inflated, self.max_inflate_ratio)


@dataclass
class FolderWatchConfig:
    """`lake watch`: a Hermes skills folder and an inbox of trajectory files, mirrored into the lake."""

    skills: Optional[Path] = field(default=None, **helped("Hermes skills folder to mirror into the lake."))
    inbox: Optional[Path] = field(default=None, **helped(
        "A dedicated folder to drop trajectory files into: it takes every *.jsonl / *.ndjson (plain or .gz; other "
        "files are left alone), each ingested whole, then moved to .done/ (or .rejected/ with a reason). For the "
        "folder Hermes runs in, use --hermes-dir."))
    hermes_dir: Optional[Path] = field(default=None, **helped(
        "The folder Hermes Agent runs in: takes only Hermes' own trajectory files (trajectory_samples*.jsonl, "
        "failed_trajectories*.jsonl, plain or .gz, and batch_runner's trajectories.jsonl) as --inbox does; any other "
        ".jsonl there (your own) stays where it is, said once."))
    settle: float = field(default=0.5, **helped("Seconds a file must stay unchanged before it is read."))
    interval: float = field(default=2.0, **helped("Rescan interval in seconds (watchdog wakes it earlier)."))
    max_file_mb: float = field(default=256.0, **helped(
        "Largest inbox file accepted, after gunzip (MiB): a file is parsed whole, at up to ~10x its size in memory "
        "(bigger files: `lake import`, or raise this)."))
    max_inflate_ratio: float = field(default=100.0, **helped(RATIO_HELP))
    compact_interval: float = field(default=10.0, **helped(COMPACT_HELP))

    def __post_init__(self):
        check_compact_interval(self.compact_interval)
        if self.skills is None and self.inbox is None and self.hermes_dir is None:
            raise OptionError("give --skills DIR and/or --inbox DIR (or --hermes-dir DIR)")
        if self.inbox is not None and self.hermes_dir is not None:
            raise OptionError("give --inbox DIR (a dedicated folder: every trajectory file) or --hermes-dir DIR (Hermes' "
                             "working folder: its own file names only), not both")
        at_least(self, 0, "settle", error=OptionError)
        positive(self, "interval", "max_file_mb", error=OptionError)
        at_least(self, 1, "max_inflate_ratio", error=OptionError)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * MiB)


@dataclass
class ImportConfig:
    """`lake import`: trajectory files (Hermes ShareGPT, Atropos groups, native JSONL), each all or nothing."""

    format: str = field(default="auto", **helped("auto | hermes | atropos | native"))

    def __post_init__(self):
        if self.format not in FORMATS:
            raise OptionError(f"--format must be one of {', '.join(FORMATS)}, not {self.format!r}")
