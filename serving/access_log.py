"""The model server's access log on stderr, unless `--quiet`: one line per request once its answer is sent (a stream:
once it ends), and one more when a generating request starts, so an operator sees a call that takes minutes while
it runs; every line starts with its UTC time:

    2026-12-06T18:05:01.112Z lake serve-model: POST /v1/chat/completions started
    2026-12-06T18:05:03.045Z lake serve-model: POST /v1/chat/completions 200 smollm2@watch-sft-1a2b3c4d:3 2381+45 tokens 1.93 s

method, route, status, the version that answered (the X-Lachesis-Version header, '-' for none), prompt + completion
tokens ('-' for a request that generated nothing) and the time from the request to its answer's last part. A route
gives its token counts through `note_tokens`, which reaches the request's entry through a context variable: the
streaming body runs in a task of the request's context, so it reaches the same entry. A 404 (an agent probing routes
we do not have: Hermes asks five on every conversation) is logged the first time its route is asked, with a note;
later ones are counted in /v1/health's `unknown_routes`, not logged one by one.
"""
from __future__ import annotations

import sys
import time
from contextvars import ContextVar
from datetime import datetime, timezone

_entry: ContextVar[dict | None] = ContextVar("serve_model_access_entry", default=None)
GENERATING = ("/v1/chat/completions", "/v1/completions")  # the routes whose start gets a line of its own


def stamp() -> str:
    """The UTC time that starts every log line of the server (milliseconds)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def log(text: str) -> None:
    """One line of the server's log on stderr, stamped."""
    print(f"{stamp()} lake serve-model: {text}", file=sys.stderr, flush=True)


def note_tokens(prompt: int, completion: int) -> None:
    """The current request's prompt and completion token counts, for its access-log line."""
    entry = _entry.get()
    if entry is not None:
        entry["tokens"] = f"{prompt}+{completion} tokens"


class AccessLog:
    """ASGI middleware writing the access-log line of each HTTP request (nothing when `quiet`)."""

    def __init__(self, app, version_header: str, quiet: bool = False):
        self.app, self.quiet = app, quiet
        self.version_header = version_header.lower().encode()
        self.not_found: set[tuple[str, str]] = set()  # the 404 routes logged once already

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.quiet:
            await self.app(scope, receive, send)
            return
        entry = {"status": "-", "version": "-", "tokens": "- tokens", "t0": time.perf_counter(), "done": False}
        _entry.set(entry)
        if scope["method"] == "POST" and scope["path"] in GENERATING:
            log(f"POST {scope['path']} started")

        async def sending(message):
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
                entry["version"] = next((v.decode("latin-1") for k, v in message.get("headers", [])
                                         if k == self.version_header), "-")
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._line(scope, entry)  # before the last byte goes: a client that reads the log after sees it
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._line(scope, entry)  # a client gone mid-stream, or no answer at all: still one line

    def _line(self, scope, entry: dict) -> None:
        if entry["done"]:
            return
        entry["done"] = True
        path = scope["path"][:200].encode("unicode_escape").decode("ascii")  # a %0A in a path is no second line
        note = ""
        if entry["status"] == 404:
            route = (scope["method"], path)
            if route in self.not_found or len(self.not_found) >= 1000:  # a scan of many paths: the first 1000
                return
            self.not_found.add(route)
            note = " (a route we do not have; later 404s of it are counted in /v1/health, not logged)"
        log(f"{scope['method']} {path} {entry['status']} {entry['version']} {entry['tokens']} "
            f"{time.perf_counter() - entry['t0']:.2f} s{note}")
