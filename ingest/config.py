"""The typed configuration of the ingest commands (`lake serve`, `lake watch`, `lake import`).

One dataclass per command: each field's default and help text are the CLI option's (lachesis.console.option),
and `__post_init__` refuses a bad value with one line. Kept free of heavy imports: the CLI builds its options
from these classes at start-up.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

from ground.errors import UserError

MiB = 1 << 20
KiB = 1 << 10
INFLATE_FLOOR = MiB  # any gzip body or file may inflate this far, whatever its ratio
# Why these defaults: Atropos groups and Hermes trajectories gzip at about 3-10:1 (JSON token ids and text),
# a gzip bomb at 1000:1 (255 KB of it inflated to 250 MiB of valid JSON and cost the server 2.5 GB); parsed
# JSON takes up to ~10x its size in memory, so 64 MiB per request leaves room for several at once.
RATIO_HELP = ("Largest gunzip ratio beyond the first MiB: N bytes of gzip may inflate to max(1 MiB, ratio x N), "
              "so a gzip bomb (1000:1) stops early while real JSON (3-10:1) passes.")


class OptionError(UserError, ValueError):
    """A bad option of an ingest command (or of `just up`, which starts them): one line naming it, a ValueError to
    the code that checks options."""


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_compact_interval(seconds: float) -> None:
    if seconds < 0:
        raise OptionError("--compact-interval must not be negative (0 turns automatic compaction off)")


def inflate_limit(compressed: int, cap: int, ratio: float) -> int:
    """The most bytes `compressed` bytes of gzip may inflate to: at most `cap`, and `ratio` times their size
    beyond INFLATE_FLOOR."""
    return min(cap, max(INFLATE_FLOOR, int(ratio * compressed)))


TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a client's name in a token file (it goes into recorded metadata)


def resolve_tokens(token: str | None, token_file: Path | None) -> dict[str, str]:
    """The bearer tokens of a server of ours (`lake serve`, `lake serve-model`) by client name: --token /
    LACHESIS_TOKEN (one token, named ""), or --token-file: its first line (one token, named ""), or one `NAME TOKEN`
    line per client (blank lines and # comments skipped), so that each client has its own identity (the model
    server joins conversations only within one: serving/record.py). {} when there is none; OptionError (one line)
    when the file cannot be read or a line is not a name and a token, or a name or token comes twice."""
    if token_file is None:
        return {"": token} if token else {}  # an empty LACHESIS_TOKEN is no token
    if token:
        raise OptionError("give the token one way: --token-file, --token or LACHESIS_TOKEN")
    try:
        lines = [line.split() for line in token_file.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"--token-file {token_file}: cannot read a token ({exc})") from None
    if not lines or not lines[0]:
        raise OptionError(f"--token-file {token_file}: the first line is empty")
    if len(lines[0]) == 1:  # one token on the first line, as before named tokens
        return {"": lines[0][0]}
    named: dict[str, str] = {}
    for n, parts in enumerate(lines, 1):
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) != 2 or not TOKEN_NAME.fullmatch(parts[0]):
            raise OptionError(f"--token-file {token_file}: line {n} is not `NAME TOKEN` (a name of 1-64 letters, "
                              "digits, '.', '_' or '-', a space, the token)")
        if parts[0] in named or parts[1] in named.values():
            raise OptionError(f"--token-file {token_file}: line {n} repeats a client's name or token: each client "
                              "needs its own")
        named[parts[0]] = parts[1]
    return named


SERVE_MODES = ("at-least-once", "at-most-once")
COMPACT_HELP = ("Seconds between passes of the automatic compaction (lake.autocompact: the small files of streaming "
                "ingest merged per day partition in the background, without blocking a writer); 0 turns it off.")
FORMATS = ("auto", "hermes", "atropos", "native")


@dataclass
class HttpLimits:
    """What one client may cost a server: head size, time to send it, idle time, connections (enforced by
    `ingest.http_limits`, which says why each is needed)."""

    max_header_kb: float = field(default=64.0, metadata={
        "help": "Largest request head (request line and headers, KiB): more is a 431, refused as it arrives."})
    max_headers: int = field(default=100, metadata={"help": "Most header fields in one request (more: 431)."})
    max_request_line_kb: float = field(default=8.0, metadata={
        "help": "Longest request target (path and query, KiB): more is a 414."})
    header_timeout: float = field(default=10.0, metadata={
        "help": "Seconds a client has to send a request's head, from connecting (or from its first byte after "
                "a keep-alive pause); an idle or slowly written (slowloris) connection is then closed."})
    read_timeout: float = field(default=30.0, metadata={
        "help": "Seconds a connection may make no progress in the middle of a request: no byte of its body "
                "received, or none of a pending answer taken by the client; it is then closed."})
    keep_alive_timeout: float = field(default=5.0, metadata={
        "help": "Seconds an idle keep-alive connection stays open between requests."})
    max_connections: int = field(default=1000, metadata={
        "help": "Most open connections (lowered to fit the open-file limit); beyond it the connection idle the "
                "longest is closed; when every connection has a request in progress, the newcomer may only ask for "
                "/v1/health (anything else: a 503)."})
    body_timeout: float = field(default=120.0, metadata={
        "help": "Seconds a request's whole body may take to arrive, from the end of its head, however steadily it "
                "trickles in; then a 408 and the connection is closed."})
    max_per_client: int = field(default=256, metadata={
        "help": "Most open connections from one client address; beyond it that client's connection idle the "
                "longest is closed, else its newcomer may only ask for /v1/health (anything else: a 503)."})

    def __post_init__(self):
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise OptionError(f"--{f.name.replace('_', '-')} must be positive, not {getattr(self, f.name)}")

    @property
    def max_head(self) -> int:
        return int(self.max_header_kb * KiB)

    @property
    def max_target(self) -> int:
        return int(self.max_request_line_kb * KiB)


# The flags of HttpLimits' fields: one list for both servers' command lines (`lake serve`, `lake serve-model`).
HTTP_LIMIT_OPTIONS = [(f, "--" + f.replace("_", "-")) for f in (
    "max_header_kb", "max_headers", "max_request_line_kb", "header_timeout", "read_timeout", "body_timeout",
    "keep_alive_timeout", "max_connections", "max_per_client")]


@dataclass
class ServeConfig:
    """`lake serve`: the durable trajectory API (native /v1 routes and the Atropos run-api routes)."""

    host: str = field(default="127.0.0.1", metadata={"help": "Interface to bind (loopback by default)."})
    port: int = field(default=8000, metadata={"help": "TCP port."})
    token: Optional[str] = field(default=None, metadata={
        "help": "Bearer token required on every route but /v1/health (reads hand out what was posted). Prefer the "
                "LACHESIS_TOKEN environment variable or --token-file: a --token shows in `ps`."})
    token_file: Optional[Path] = field(default=None, metadata={
        "help": "Read the bearer token from this file: its first line, or one `NAME TOKEN` line per client."})
    tokens: dict = field(default_factory=dict, init=False, repr=False, metadata={
        "help": "The accepted tokens by client name (from --token or --token-file)."})
    allowed_hosts: Optional[str] = field(default=None, metadata={
        "help": "Comma-separated host names clients may use in the Host header besides IP addresses, localhost "
                "and this machine's names ('*': any). Other names are refused (403): a DNS-rebinding guard."})
    max_body_mb: float = field(default=64.0, metadata={"help": "Largest request body accepted (MiB, as sent)."})
    max_inflated_mb: float = field(default=64.0, metadata={
        "help": "Largest body after gunzip (MiB), whatever its ratio (the gzip-bomb limit, with the ratio)."})
    max_inflate_ratio: float = field(default=100.0, metadata={"help": RATIO_HELP})
    log_level: str = field(default="warning", metadata={"help": "uvicorn log level."})
    serve_mode: str = field(default="at-least-once", metadata={
        "help": "at-least-once: a batch counts as served once the trainer comes back for the next one; after a "
                "crash an unconfirmed batch is served again. at-most-once: recorded before it is sent; a batch "
                "lost in flight is not re-sent."})
    bind_retry_s: float = field(default=0.0, metadata={
        "help": "Keep trying to bind a port still in use for this long (a standby that takes over when the "
                "running server exits)."})
    compact_interval: float = field(default=10.0, metadata={"help": COMPACT_HELP})
    limits: HttpLimits = field(default_factory=HttpLimits, metadata={
        "help": "HTTP limits: head size and fields, head and body timeouts, keep-alive, connections."})
    fsync: bool = field(default=True, metadata={
        "help": "fsync each commit before its 2xx (power-loss durability). --no-fsync keeps acks safe against a "
                "killed server but not a power loss: for measuring what fsync costs (bench/bench_ingest.py)."})

    def __post_init__(self):
        if self.serve_mode not in SERVE_MODES:
            raise OptionError(f"--serve-mode must be one of {', '.join(SERVE_MODES)}, not {self.serve_mode!r}")
        if not 0 <= self.port < 65536:
            raise OptionError(f"--port must be between 0 and 65535, not {self.port}")
        if self.max_body_mb <= 0 or self.max_inflated_mb <= 0:
            raise OptionError("--max-body-mb and --max-inflated-mb must be positive")
        if self.max_inflate_ratio < 1:
            raise OptionError("--max-inflate-ratio must be at least 1")
        if self.bind_retry_s < 0:
            raise OptionError("--bind-retry-s must not be negative")
        check_compact_interval(self.compact_interval)
        self.tokens = resolve_tokens(self.token, self.token_file)
        self.token = next(iter(self.tokens.values()), None)  # set: auth is on

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * MiB)

    @property
    def max_inflated(self) -> int:
        return int(self.max_inflated_mb * MiB)

    @property
    def loopback(self) -> bool:
        """Bound to this machine only (a token is then optional)."""
        return is_loopback(self.host)

    def inflated_limit(self, compressed: int) -> int:
        """How far a gzip body of `compressed` bytes may inflate."""
        return inflate_limit(compressed, self.max_inflated, self.max_inflate_ratio)


@dataclass
class FolderWatchConfig:
    """`lake watch`: a Hermes skills folder and an inbox of trajectory files, mirrored into the lake."""

    skills: Optional[Path] = field(default=None, metadata={"help": "Hermes skills folder to mirror into the lake."})
    inbox: Optional[Path] = field(default=None, metadata={
        "help": "A dedicated folder to drop trajectory files into: it takes every *.jsonl / *.ndjson (plain or .gz; "
                "other files are left alone), each ingested whole, then moved to .done/ (or .rejected/ with a "
                "reason). For the folder Hermes runs in, use --hermes-dir."})
    hermes_dir: Optional[Path] = field(default=None, metadata={
        "help": "The folder Hermes Agent runs in: takes only Hermes' own trajectory files (trajectory_samples*."
                "jsonl, failed_trajectories*.jsonl, plain or .gz, and batch_runner's trajectories.jsonl) as --inbox "
                "does; any other .jsonl there (your own) stays where it is, said once."})
    settle: float = field(default=0.5, metadata={"help": "Seconds a file must stay unchanged before it is read."})
    interval: float = field(default=2.0, metadata={
        "help": "Rescan interval in seconds (watchdog wakes it earlier)."})
    max_file_mb: float = field(default=256.0, metadata={
        "help": "Largest inbox file accepted, after gunzip (MiB): a file is parsed whole, at up to ~10x its size "
                "in memory (bigger files: `lake import`, or raise this)."})
    max_inflate_ratio: float = field(default=100.0, metadata={"help": RATIO_HELP})
    compact_interval: float = field(default=10.0, metadata={"help": COMPACT_HELP})

    def __post_init__(self):
        check_compact_interval(self.compact_interval)
        if self.skills is None and self.inbox is None and self.hermes_dir is None:
            raise OptionError("give --skills DIR and/or --inbox DIR (or --hermes-dir DIR)")
        if self.inbox is not None and self.hermes_dir is not None:
            raise OptionError("give --inbox DIR (a dedicated folder: every trajectory file) or --hermes-dir DIR (Hermes' "
                             "working folder: its own file names only), not both")
        if self.settle < 0 or self.interval <= 0:
            raise OptionError("--settle must not be negative and --interval must be positive")
        if self.max_file_mb <= 0:
            raise OptionError("--max-file-mb must be positive")
        if self.max_inflate_ratio < 1:
            raise OptionError("--max-inflate-ratio must be at least 1")

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * MiB)


@dataclass
class ImportConfig:
    """`lake import`: trajectory files (Hermes ShareGPT, Atropos groups, native JSONL), each all or nothing."""

    format: str = field(default="auto", metadata={"help": "auto | hermes | atropos | native"})

    def __post_init__(self):
        if self.format not in FORMATS:
            raise OptionError(f"--format must be one of {', '.join(FORMATS)}, not {self.format!r}")
