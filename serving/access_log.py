"""The model server's access log: one line per request on stderr, once its answer is sent (a stream: once it ends),
unless `--quiet`:

    lake serve-model: POST /v1/chat/completions 200 smollm2@watch-sft-1a2b3c4d:3 2381+45 tokens 1.93 s

method, route, status, the version that answered (the X-Lachesis-Version header, '-' for none), prompt + completion
tokens ('-' for a request that generated nothing) and the time from the request to its answer's last part. A route
gives its token counts through `note_tokens`, which reaches the request's entry through a context variable: the
streaming body runs in a task of the request's context, so it reaches the same entry.
"""
from __future__ import annotations

import sys
import time
from contextvars import ContextVar

_entry: ContextVar[dict | None] = ContextVar("serve_model_access_entry", default=None)


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

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.quiet:
            await self.app(scope, receive, send)
            return
        entry = {"status": "-", "version": "-", "tokens": "- tokens", "t0": time.perf_counter(), "done": False}
        _entry.set(entry)

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

    @staticmethod
    def _line(scope, entry: dict) -> None:
        if entry["done"]:
            return
        entry["done"] = True
        path = scope["path"][:200].encode("unicode_escape").decode("ascii")  # a %0A in a path is no second line
        print(f"lake serve-model: {scope['method']} {path} {entry['status']} {entry['version']} "
              f"{entry['tokens']} {time.perf_counter() - entry['t0']:.2f} s", file=sys.stderr, flush=True)
