"""The typed configuration of the ingest commands (`lake serve`, `lake watch`, `lake import`).

One dataclass per command: each field's default and help text are the CLI option's (lachesis.console.option),
and `__post_init__` refuses a bad value with one line. Kept free of heavy imports: the CLI builds its options
from these classes at start-up.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import stat
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
TOKEN_TEXT = re.compile(r"[!-~]{1,4096}")  # a token: visible ASCII, what an Authorization header carries as sent
TOKEN_FILE_MAX = MiB  # a token file is a few lines: more is not one
GRADER = "grader"  # the one word a `NAME TOKEN` line may end with: that client may reward any trajectory
TOKEN_FILE_GRAMMAR = ("a token file holds one bare TOKEN, or one `NAME TOKEN` or `NAME TOKEN grader` line per client "
                      "(NAME: 1-64 letters, digits, '.', '_' or '-'; TOKEN: visible ASCII; `grader`: that client may "
                      "post rewards for any client's trajectories), with blank lines and whole-line # comments")


class Tokens(dict):
    """The accepted bearer tokens: token -> the client's name ("" for a bare token, --token or LACHESIS_TOKEN).
    `client` finds the sender of an Authorization header by a dict lookup on its SHA-256 digest: constant time
    whatever the number of tokens, and the time taken says nothing of how close a wrong token came (a digest
    shares no prefix with the token it hides). `graders`: the names whose line ends with `grader` (they may
    reward any client's trajectories; every other named client only its own: ingest/routes_native.py)."""

    def __init__(self, by_token=(), graders=()):
        super().__init__(by_token)
        self.graders = frozenset(graders)
        self._by_digest = {_digest(f"Bearer {t}"): name for t, name in self.items()}

    def client(self, authorization: str) -> str | None:
        """The name of the client whose `Bearer <token>` this header is, else None."""
        return self._by_digest.get(_digest(authorization))

    def may_reward_any(self, client: str) -> bool:
        """Whether `client` may reward trajectories it did not post: one identity (no tokens, or one bare token:
        every client is "", as before) or a grader's token."""
        return not client or client in self.graders


def _digest(header: str) -> bytes:
    return hashlib.sha256(header.encode("utf-8", "surrogatepass")).digest()


def resolve_tokens(token: str | None, token_file: Path | None) -> Tokens:
    """The bearer tokens of a server of ours (`lake serve`, `lake serve-model`), token -> client name: --token /
    LACHESIS_TOKEN (one token, named ""; an empty one is none), or --token-file (`read_token_file`: its grammar).
    Empty only when no token is given at all: then auth is off, which the server's start line says. OptionError
    (one line) for both at once, or a file that is not a token file."""
    if token_file is None:
        return Tokens({token: ""} if token else {})
    if token:
        raise OptionError("give the token one way: --token-file, --token or LACHESIS_TOKEN")
    return read_token_file(token_file)


def read_token_file(path: Path) -> Tokens:
    """A --token-file, by its grammar (TOKEN_FILE_GRAMMAR): one bare token (every client is the one identity
    ""), or one `NAME TOKEN` line per client, so that each has its own identity (the model server joins
    conversations only within one: serving/record.py), optionally ending with the word `grader` (that client may
    post rewards for any client's trajectories: Tokens.graders); blank lines and lines whose first visible
    character is # are skipped. Refused with one line naming the line (OptionError): a file with no token, a
    line of another shape (a third word other than `grader` included), a bare token beside other tokens, a name
    or a token given twice; and before it is opened, anything but a regular file of at most TOKEN_FILE_MAX
    bytes (a FIFO would block the start, a device never end)."""
    where = f"--token-file {path}"
    text = _token_file_text(path, where)
    tokens: dict[str, str] = {}
    names: set[str] = set()
    graders: set[str] = set()
    bare = 0  # the line of the bare token, if one was read
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        grader = len(parts) == 3 and parts[2] == GRADER
        if grader:
            parts = parts[:2]
        if len(parts) > 2 or not TOKEN_TEXT.fullmatch(parts[-1]) or (len(parts) == 2
                                                                      and not TOKEN_NAME.fullmatch(parts[0])):
            third = " (a third word can only be `grader`)" if len(parts) == 3 else ""  # never echoed: it may be a token
            raise OptionError(f"{where}: line {n} is neither `NAME TOKEN [grader]` nor a bare TOKEN{third} "
                              f"({TOKEN_FILE_GRAMMAR})")
        name = parts[0] if len(parts) == 2 else ""
        if bare:
            raise OptionError(f"{where}: line {n} is a second token after the bare token of line {bare}: name "
                              "every client (`NAME TOKEN`), or give one bare token")
        if not name and tokens:
            raise OptionError(f"{where}: line {n} is a bare token among `NAME TOKEN` lines: name every client")
        if parts[-1] in tokens or name in names:
            raise OptionError(f"{where}: line {n} repeats a client's {'token' if parts[-1] in tokens else 'name'}: "
                              "each client needs its own")
        tokens[parts[-1]] = name
        names.add(name)
        if grader:
            graders.add(name)
        bare = 0 if name else n
    if not tokens:
        raise OptionError(f"{where}: no token in it (only blank lines and # comments): {TOKEN_FILE_GRAMMAR}; "
                          "leave the option out to run without auth")
    return Tokens(tokens, graders)


def _token_file_text(path: Path, where: str) -> str:
    """The file's text, read only once it is known to be a small regular file: stat before opening (a FIFO is
    never opened, so nothing waits for a writer), then fstat of what was opened (non-blocking) in case it was
    swapped meanwhile, and at most TOKEN_FILE_MAX + 1 bytes read."""
    try:
        _check_token_file(os.stat(path), where)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            _check_token_file(os.fstat(fd), where)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(TOKEN_FILE_MAX + 1)
        finally:
            os.close(fd)
        _check_token_file_size(len(data), where)
        return data.decode("utf-8-sig")
    except OSError as exc:
        raise OptionError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise OptionError(f"{where}: not UTF-8 text, not a file of tokens") from None


def _check_token_file(st: os.stat_result, where: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise OptionError(f"{where}: {kind}, not a file of tokens (give a regular file)")
    _check_token_file_size(st.st_size, where)


def _check_token_file_size(size: int, where: str) -> None:
    if size > TOKEN_FILE_MAX:
        raise OptionError(f"{where}: over {TOKEN_FILE_MAX} bytes, too large for a file of tokens")


def auth_summary(tokens: Tokens) -> str:
    """What a server's start line says of auth: off (no token given), or on and for how many named clients."""
    if not tokens:
        return "auth=off (no --token, --token-file or LACHESIS_TOKEN)"
    named = sum(1 for name in tokens.values() if name)
    graders = len(tokens.graders)
    graded = f", {graders} grader{'s' * (graders != 1)}" if graders else ""
    return f"auth=on ({named} named client{'s' * (named != 1)}{graded})" if named else "auth=on (one token)"


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
        "help": "Read the bearer tokens from this file: one bare token, or one `NAME TOKEN` line per client, "
                "`NAME TOKEN grader` for a client that may reward any client's trajectories (blank lines and # "
                "comment lines skipped); a file with no token, or another line, is refused."})
    tokens: Tokens = field(default_factory=Tokens, init=False, repr=False, metadata={
        "help": "The accepted tokens, token -> client name (from --token or --token-file)."})
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
        self.token = next(iter(self.tokens), None)  # set: auth is on

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
