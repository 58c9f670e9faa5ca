"""Group commit for the HTTP server: the requests pending while the previous commit ran, plus those already
being parsed, become one lake submit.

A request is answered only after the Delta version holding its rows is committed (a 2xx means durable).
Batching many requests into one submit is what keeps the server's throughput close to the lake's commit
rate instead of one Delta version per request.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

from edge.lake_errors import LakeWriteFailed, log_line, store_failure
from ingest.records import ArrowRows
from lake.errors import LAKE_ERRORS

log = logging.getLogger("lachesis.ingest.batcher")


class CommitFailed(LakeWriteFailed):
    """The lake did not commit: transient for the client (503, retry: edge/lake_errors.py)."""


@dataclass
class _Pending:
    rows: ArrowRows
    future: asyncio.Future

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class Expected:
    """A request on its way to a batcher (body read, being parsed); released when it hands its rows over or
    ends without them. A context manager: leaving it releases (once)."""

    def __init__(self, batcher: "TableBatcher"):
        self.batcher, self.open = batcher, True
        batcher.expected += 1

    def release(self) -> None:
        if self.open:
            self.open = False
            self.batcher.expected -= 1
            self.batcher.arrived.set()

    def __enter__(self) -> "Expected":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class TableBatcher:
    """One table's queue of pending requests; `commit()` resolves once their rows are in a Delta version.

    Requests arrive with their rows already in Arrow (built and checked where the request was parsed, so a row
    that does not fit is that request's 422), so gathering them is a concatenation on the event loop: no
    thread hop and nothing converted here. While a submit of ours is committing, what arrives is held and goes
    as one submit when that commit is done; before a submit, the batcher waits (at most `gather_s`) for the
    requests that announced themselves (`expect`) and are still being parsed. A Delta version costs ~30 ms of
    CPU whatever it holds (docs/ingest-profile.md): a version for the first group of a burst and another for
    the rest would cost twice that for the same groups."""

    def __init__(self, writer, table: str, gather_s: float = 0.025):
        self.writer, self.table = writer, table
        self.gather_s = gather_s
        self.pending: list[_Pending] = []
        self.expected = 0  # requests being parsed that will hand rows to this batcher (Expected)
        self.inflight = 0  # submits of ours the lake has not committed yet
        self.wake, self.arrived = asyncio.Event(), asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.commits = 0
        self.rows = 0
        self.timings: deque = deque(maxlen=2000)  # (build_s, commit_s, rows) per lake submit

    def expect(self) -> Expected:
        return Expected(self)

    async def commit(self, rows: ArrowRows, expected: Expected | None = None):
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(_Pending(rows, fut))
        if expected is not None:
            expected.release()
        self.wake.set()
        return await fut

    async def _gather(self) -> None:
        """Wait until no expected request is still being parsed, or gather_s passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gather_s
        while self.expected and (left := deadline - loop.time()) > 0:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                return

    async def _run(self):
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.inflight:
                continue  # the lake is committing our previous submit: _finish wakes us when it is done
            await self._gather()
            items, self.pending = self.pending, []
            if not items:
                continue
            t0 = time.perf_counter()
            try:
                cf = ArrowRows.concat([it.rows for it in items]).submit(self.writer, self.table)
            except LAKE_ERRORS as exc:
                self._fail(items, exc)
                continue
            except BaseException as exc:  # a bug: its waiters get the error (a 500), the loop keeps serving
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.exception("submitting to %s failed", self.table)
                for it in items:
                    it.fail(exc)
                continue
            self.inflight += 1
            asyncio.ensure_future(self._finish(cf, items, t0, time.perf_counter()))

    def _fail(self, items: list[_Pending], exc: BaseException) -> None:
        log.error("commit to %s failed: %s", self.table, log_line(exc))
        for it in items:  # the client's message: one line, no colour codes or the lake's paths (store_failure)
            it.fail(CommitFailed(store_failure(exc)))

    async def _finish(self, cf, items: list[_Pending], t0: float, t1: float):
        try:
            res = await asyncio.wrap_future(cf)
        except LAKE_ERRORS as exc:
            self._fail(items, exc)
            return
        except BaseException as exc:  # every waiter must hear about an unexpected failure too, then it propagates
            for it in items:
                it.fail(exc)
            raise
        finally:
            self.inflight -= 1
            if self.pending:
                self.wake.set()
        self.timings.append((t1 - t0, time.perf_counter() - t1, sum(it.rows.payload.num_rows for it in items)))
        self.commits += 1
        self.rows += sum(it.rows.payload.num_rows for it in items)
        for it in items:
            if not it.future.done():
                it.future.set_result(res)

    def timing(self) -> dict:
        """Medians of the recent submits (for /v1/stats)."""
        if not self.timings:
            return {}
        ts = list(self.timings)

        def med(xs):
            return sorted(xs)[len(xs) // 2]

        return {"build_ms_p50": round(med([t[0] for t in ts]) * 1000, 1),
                "commit_ms_p50": round(med([t[1] for t in ts]) * 1000, 1),
                "rows_per_submit_p50": med([t[2] for t in ts])}
