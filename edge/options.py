"""The options both servers take alike, typed: `ServerOptions` (where a server listens, who may call it, how big a
body may be, uvicorn's log level, the lake's automatic compaction, the HTTP limits), each field's help written once
here, and `HttpLimits` (what one client may cost a server: edge/limits.py enforces it). `lake serve`'s ServeConfig
(ingest/config.py) and `lake serve-model`'s ServeModelConfig (serving/config.py) derive from ServerOptions; the CLI
builds both commands' options from their fields (lachesis/console.py `config_command`).

Kept free of heavy imports (no fastapi, no uvicorn): the CLI builds its options from these classes at start-up.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from edge.errors import OptionError
from edge.tokens import Tokens, resolve_tokens
from ground.options import helped
from ground.ranges import positive

MiB = 1 << 20
KiB = 1 << 10
INFLATE_FLOOR = MiB  # any gzip body or file may inflate this far, whatever its ratio
INFLATE_RATIO = 100.0  # a gzip body may inflate this many times its size beyond INFLATE_FLOOR, unless a server says
COMPACT_HELP = ("Seconds between passes of the automatic compaction (lake.autocompact: the small files of streaming "
                "ingest merged per day partition in the background, without blocking a writer); 0 turns it off.")


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


@dataclass
class HttpLimits:
    """What one client may cost a server: head size, time to send it, idle time, connections (enforced by
    `edge.limits`, which says why each is needed)."""

    max_header_kb: float = field(default=64.0, **helped(
        "Largest request head (request line and headers, KiB): more is a 431, refused as it arrives."))
    max_headers: int = field(default=100, **helped("Most header fields in one request (more: 431)."))
    max_request_line_kb: float = field(default=8.0, **helped(
        "Longest request target (path and query, KiB): more is a 414."))
    header_timeout: float = field(default=10.0, **helped(
        "Seconds a client has to send a request's head, from connecting (or from its first byte after a keep-alive "
        "pause); an idle or slowly written (slowloris) connection is then closed."))
    read_timeout: float = field(default=30.0, **helped(
        "Seconds a connection may make no progress in the middle of a request: no byte of its body received, or "
        "none of a pending answer taken by the client; it is then closed."))
    keep_alive_timeout: float = field(default=5.0, **helped(
        "Seconds an idle keep-alive connection stays open between requests."))
    max_connections: int = field(default=1000, **helped(
        "Most open connections (lowered to fit the open-file limit); beyond it the connection idle the longest is "
        "closed; when every connection has a request in progress, the newcomer may only ask for /v1/health "
        "(anything else: a 503)."))
    body_timeout: float = field(default=120.0, **helped(
        "Seconds a request's whole body may take to arrive, from the end of its head, however steadily it trickles "
        "in; then a 408 and the connection is closed."))
    max_per_client: int = field(default=256, **helped(
        "Most open connections from one client address; beyond it that client's connection idle the longest is "
        "closed (one that has not begun a request only after a moment: it may be a health probe), else its newcomer "
        "may only ask for /v1/health (anything else: a 503)."))

    def __post_init__(self):
        positive(self, *(f.name for f in fields(self)), error=OptionError)

    @property
    def max_head(self) -> int:
        return int(self.max_header_kb * KiB)

    @property
    def max_target(self) -> int:
        return int(self.max_request_line_kb * KiB)


# The flags of HttpLimits' fields, in --help order: one list for both servers' command lines (the CLI expands a
# server config's `limits` field into these options: lachesis/console.py `config_command`).
HTTP_LIMIT_OPTIONS = [(f, "--" + f.replace("_", "-")) for f in (
    "max_header_kb", "max_headers", "max_request_line_kb", "header_timeout", "read_timeout", "body_timeout",
    "keep_alive_timeout", "max_connections", "max_per_client")]


@dataclass(kw_only=True)
class ServerOptions:
    """What `lake serve` and `lake serve-model` take alike, with one help text each; a server whose default differs
    declares the field again with `server_field` (the help stays this one). `__post_init__` checks them (OptionError,
    one line) and resolves the tokens; edge/guards.py's guards read `tokens`, `max_body` and `inflated_limit`."""

    host: str = field(default="127.0.0.1", **helped("Interface to bind (loopback by default)."))
    port: int = field(default=8000, **helped("TCP port."))
    token: Optional[str] = field(default=None, **helped(
        "Bearer token required on every route but /v1/health, reads included (an OpenAI client's api_key). Prefer "
        "the LACHESIS_TOKEN environment variable or --token-file: a --token shows in `ps`."))
    token_file: Optional[Path] = field(default=None, **helped(
        "Read the bearer tokens from this file: one bare token, or one `NAME TOKEN` line per client (each its own "
        "identity: lake serve-model joins conversations only within one), `NAME TOKEN grader` for a client that may "
        "reward any client's trajectories (blank lines and # comment lines skipped); a file with no token, or "
        "another line, is refused."))
    tokens: Tokens = field(default_factory=Tokens, init=False, repr=False, **helped(
        "The accepted tokens, token -> client name (from --token or --token-file: edge/tokens.py)."))
    allowed_hosts: Optional[str] = field(default=None, **helped(
        "Comma-separated host names clients may use in the Host header besides IP addresses, localhost and this "
        "machine's names ('*': any). Other names are refused (403): a DNS-rebinding guard."))
    max_body_mb: float = field(default=64.0, **helped("Largest request body accepted (MiB, as sent)."))
    log_level: str = field(default="warning", **helped("uvicorn log level."))
    compact_interval: float = field(default=10.0, **helped(COMPACT_HELP))
    limits: HttpLimits = field(default_factory=HttpLimits, **helped(
        "HTTP limits: head size and fields, head and body timeouts, keep-alive, connections in all and per client "
        "address (edge/limits.py)."))

    def __post_init__(self):
        if not 0 <= self.port < 65536:
            raise OptionError(f"--port must be between 0 and 65535, not {self.port}")
        if self.max_body_mb <= 0:
            raise OptionError("--max-body-mb must be positive")
        check_compact_interval(self.compact_interval)
        self.tokens = resolve_tokens(self.token, self.token_file)
        self.token = next(iter(self.tokens), None)  # set: auth is on

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * MiB)

    @property
    def loopback(self) -> bool:
        """Bound to this machine only (a token is then optional)."""
        return is_loopback(self.host)

    def inflated_limit(self, compressed: int) -> int:
        """How far a gzip body of `compressed` bytes may inflate: the body limit, and INFLATE_RATIO times its size
        beyond the first MiB (a gzip bomb stops early). A server with options of its own for it overrides this."""
        return inflate_limit(compressed, self.max_body, INFLATE_RATIO)


def server_field(name: str, default: Any) -> Any:
    """ServerOptions' field `name` with a server's own default (`port: int = server_field("port", 8001)`): the
    help stays the one written on ServerOptions."""
    return field(default=default, metadata=ServerOptions.__dataclass_fields__[name].metadata)
