"""The bearer tokens of both servers (`lake serve`, `lake serve-model`): one grammar for --token-file
(`read_token_file`), one way to take --token / LACHESIS_TOKEN or the file (`resolve_tokens`), the accepted tokens
with their clients' names and constant-time lookup (`Tokens`: edge/guards.py's require_token reads it), and what a
server's start line says of auth (`auth_summary`)."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from edge.errors import OptionError
from ground.files import Refusal, read_named

TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a client's name in a token file (it goes into recorded metadata)
TOKEN_TEXT = re.compile(r"[!-~]{1,4096}")  # a token: visible ASCII, what an Authorization header carries as sent
TOKEN_FILE_MAX = 1 << 20  # a token file is a few lines: more (a MiB) is not one
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
    """The file's text, read only once it is known to be a small regular file (ground/files.py's read_named: opened
    without blocking, so a FIFO waits for no writer; fstat before a byte is read; at most TOKEN_FILE_MAX + 1
    bytes read)."""
    try:
        return read_named(path, TOKEN_FILE_MAX).decode("utf-8-sig")
    except Refusal as exc:
        if exc.kind == "too_large":
            raise OptionError(f"{where}: over {TOKEN_FILE_MAX} bytes, too large for a file of tokens") from None
        raise OptionError(f"{where}: {exc.what}, not a file of tokens (give a regular file)") from None
    except OSError as exc:
        raise OptionError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise OptionError(f"{where}: not UTF-8 text, not a file of tokens") from None


def auth_summary(tokens: Tokens) -> str:
    """What a server's start line says of auth: off (no token given), or on and for how many named clients."""
    if not tokens:
        return "auth=off (no --token, --token-file or LACHESIS_TOKEN)"
    named = sum(1 for name in tokens.values() if name)
    graders = len(tokens.graders)
    graded = f", {graders} grader{'s' * (graders != 1)}" if graders else ""
    return f"auth=on ({named} named client{'s' * (named != 1)}{graded})" if named else "auth=on (one token)"

