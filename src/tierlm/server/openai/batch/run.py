"""One batch running: its requests fed to the scheduler a few at a time.

At most ``batches.in_flight`` of a batch's requests are jobs at once; as one
finishes, its result is committed to the store and the next pending request
is fed. So a 50 000-line batch holds a handful of queue places, not 50 000:
the queue limits, Retry-After and the dashboard stay about what is really
waiting, and the rest of the batch waits in the store, where a restart finds
it. The jobs are background jobs of the batch's class and producer: a
person's chat preempts them as any (docs/design.md §4.6), and from the
batch's deadline on they are overdue work on a loan (§4.5).

A request the gateway could not run now (a full queue, a shutdown) stays
pending and runs again; one that ran is answered once (``finish_request``
changes a pending row only), whatever crashes between the two.

The places are jobs, not requests: a line with ``n: 16`` is 16 jobs, so it
takes ``n`` of the batch's ``in_flight`` places (docs/design.md §9; ``create``
refuses a line asking more than there are). One batch held 63 queue places
where the docs said four.

**A result the store cannot take is kept, not re-run** (§9). A full disk
made each answered request pending again, and the device re-ran it every
second (150-190 runs in 15 s for 20 requests, none stored). Now the task that
ran it holds the answer and retries the write (``_stored``, backing off to
``WRITE_RETRY_MAX``) while it keeps its place, so no new request is fed
either: the device stops until the store takes writes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tierlm.server.edge.errors import internal_error
from tierlm.server.gateway.embedding_lane import EmbeddingService
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.openai.batch.execute import Retry, run_request
from tierlm.server.openai.batch.lines import error_line, new_file, output_line
from tierlm.server.openai.batch.store import (
    BatchRecord,
    BatchStatus,
    BatchStore,
    PendingRequest,
    RequestResult,
)
from tierlm.server.openai.batch.store_errors import StoreError

__all__ = ["BatchRun", "Call", "places"]

T = TypeVar("T")

logger = logging.getLogger("tierlm.server")

# Seconds before a request whose task failed (not a store fault) is fed again.
RETRY_FAILED = 1.0
# A write the store refused (a full disk) is tried again after 1 s, then
# twice as long each time, up to this.
WRITE_RETRY_MAX = 30.0

Call = Callable[..., Awaitable[Any]]
"""Runs a store method off the event loop: ``await call(store.method, *args)``."""


class BatchRun:
    """The task running one batch until its final status (module docstring)."""

    def __init__(
        self,
        record: BatchRecord,
        store: BatchStore,
        call: Call,
        gateway: Gateway,
        embeddings: EmbeddingService | None,
        in_flight: int,
        on_result: Callable[[BatchRecord, str], None],
    ) -> None:
        self.record = record
        self.store = store
        self.call = call
        self.gateway = gateway
        self.embeddings = embeddings
        self.in_flight = in_flight
        self.on_result = on_result
        """Told each answered request's outcome (the metrics)."""
        self.running: dict[int, asyncio.Task[None]] = {}
        self.places: dict[int, int] = {}
        """The jobs (``n``) each running line holds (module docstring)."""
        self.cancelling = asyncio.Event()
        self.expired = False
        """Its window ended while it ran (the loop's clock said so)."""
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def meta(self) -> JobMeta:
        r = self.record
        deadline = None if r.deadline is None else dt.datetime.fromtimestamp(r.deadline, dt.UTC)
        owner = r.owner or None
        # The key's own queue limit holds for its batch's lines as for its
        # requests (gateway/admission): a batch is the key's work.
        limit = self.gateway.keys.queue_limit_of(owner)
        person = (owner,) if owner else ()  # as its key's requests (Principal.person)
        return JobMeta(r.class_name, r.producer, None, deadline, owner, limit, person, why="batch")

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    def cancel(self) -> None:
        """The client cancelled: stop feeding, end the jobs in flight, finalize."""
        self.cancelling.set()
        self._changed.set()

    async def _run(self) -> None:
        r = self.record
        try:
            if r.status == "validating":
                await self._status("in_progress")
            if r.status == "in_progress" and not self.cancelling.is_set():
                await self._feed()
            ending = _final(r)  # a cancel or an expiry begun before a restart
            if self.cancelling.is_set() or r.status == "cancelling" or ending == "cancelled":
                await self._end_pending("cancelled", "batch_cancelled", "the batch was cancelled")
            elif ending == "expired" or self.expired or self._past_window():
                await self._end_pending(
                    "expired",
                    "batch_expired",
                    "this request could not be executed before the completion window expired",
                )
            elif self.gateway.shutdown.draining and await self._pending_left():
                return  # resumed by the next start
            else:
                await self._finalize("completed")
        except Exception:
            logger.exception("batch %s: stopped by an error; it resumes at the next start", r.id)

    def _past_window(self) -> bool:
        # Not while finalizing: a batch that ended in time stays completed.
        return self.record.status != "finalizing" and time.time() >= self.record.expires_at

    async def _pending_left(self) -> bool:
        return bool(await self.call(self.store.pending, self.record.id, (), 1))

    async def _stored(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store, retried while the store refuses writes
        (a full disk, a read-only remount): what was done is kept meanwhile,
        never done again (module docstring). Until the gateway stops: what
        is still unwritten then runs again at the next start."""
        wait = 1.0
        while True:
            try:
                done: T = await self.call(fn, *args)
                return done
            except StoreError as exc:
                if self.gateway.shutdown.draining:
                    raise  # not written: the request runs again at the next start
                logger.warning(
                    "batch %s: %s; holding what is done, writing again in %.0f s",
                    self.record.id,
                    exc,
                    wait,
                )
                await asyncio.sleep(wait)
                wait = min(WRITE_RETRY_MAX, wait * 2)

    async def _status(self, status: BatchStatus, mark: str | None = None) -> None:
        at = int(time.time())
        await self._stored(self.store.set_status, self.record.id, status, at, mark)
        self.record.status = status
        self.record.times[f"{status}_at"] = at
        if mark is not None:
            self.record.times[f"{mark}_at"] = at

    async def _feed(self) -> None:
        loop = asyncio.get_running_loop()
        expires_in = self.record.expires_at - time.time()
        expiry = loop.time() + expires_in
        try:
            await self._feeding(loop, expiry)
        finally:
            # Ended (expiry, cancel) or cancelled itself (the gateway closes).
            await asyncio.shield(self._stop_running())

    async def _feeding(self, loop: asyncio.AbstractEventLoop, expiry: float) -> None:
        exhausted = False
        while not self.cancelling.is_set() and loop.time() < expiry:
            draining = self.gateway.shutdown.draining
            free = self.in_flight - sum(self.places.values())
            if free > 0 and not exhausted and not draining:
                skip = tuple(self.running)
                batch = await self.call(self.store.pending, self.record.id, skip, free)
                exhausted = len(batch) < free
                for pending in batch:
                    need = places(self.record.endpoint, pending)
                    if need > free and self.running:
                        exhausted = False  # fed in line order: it waits for places
                        break
                    free -= need
                    self.places[pending.line] = need
                    self.running[pending.line] = asyncio.ensure_future(self._one(pending))
                    self.running[pending.line].add_done_callback(self._done)
            if not self.running:
                if draining:
                    return
                if exhausted:
                    if not await self._pending_left():
                        return
                    # A request's result could not be written (its task failed):
                    # it is pending still; again, not in a tight loop.
                    exhausted = False
                    await asyncio.sleep(RETRY_FAILED)
                continue
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, expiry - loop.time()))
        self.expired = not self.cancelling.is_set()

    def _done(self, task: asyncio.Task[None]) -> None:
        for line, each in list(self.running.items()):
            if each is task:
                del self.running[line]
                self.places.pop(line, None)
        self._changed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "batch %s: a request's result was not stored; it runs again",
                self.record.id,
                exc_info=task.exception(),
            )

    async def _stop_running(self) -> None:
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, pending: PendingRequest) -> None:
        r = self.record
        while True:
            try:
                status, body = await run_request(
                    self.gateway, self.embeddings, self.meta, r.endpoint, dict(pending.body)
                )
            except Retry as retry:
                if self.gateway.shutdown.draining:
                    return  # stays pending: the next start runs it
                logger.debug("batch %s line %d: again later (%s)", r.id, pending.line, retry)
                await asyncio.sleep(retry.after)
                continue
            except Exception:
                logger.exception("batch %s line %d failed", r.id, pending.line)
                error = internal_error()
                status, body = error.status, error.body()
            break
        line = output_line(pending.custom_id, status, body, f"req_{secrets.token_hex(12)}")
        result = RequestResult(pending.line, pending.custom_id, line, status != 200)
        # Shielded: a cancel arriving now must not lose a result the device produced.
        if await asyncio.shield(self._stored(self.store.finish_request, r.id, result)):
            if result.error:
                r.failed += 1
            else:
                r.completed += 1
            self.on_result(r, "failed" if result.error else "completed")

    async def _end_pending(self, final: BatchStatus, code: str, message: str) -> None:
        """Answer every unrun request with ``code`` (cancel, expiry), then finalize."""
        r = self.record
        if final == "cancelled" and r.status != "cancelling":
            await self._status("cancelling")
        elif final == "expired":
            # expired_at says, if the gateway stops while finalizing, what it ends as.
            await self._status("finalizing", "expired")
        await self._stop_running()
        while pending := await self.call(self.store.pending, r.id, (), 500):
            results = [
                RequestResult(p.line, p.custom_id, error_line(p.custom_id, code, message), True)
                for p in pending
            ]
            await self._stored(self.store.finish_all_pending, r.id, results)
            r.failed += len(results)
            for _ in results:
                self.on_result(r, final)
        await self._finalize(final)

    async def _finalize(self, final: BatchStatus) -> None:
        r = self.record
        if r.status != "finalizing":
            await self._status("finalizing")
        output = new_file(r.owner, f"{r.id}_output.jsonl", "batch_output", 0)
        errors = new_file(r.owner, f"{r.id}_error.jsonl", "batch_output", 0)
        at = int(time.time())
        ids = await self._stored(self.store.finalize, r.id, final, at, output, errors)
        r.status, r.output_file_id, r.error_file_id = final, ids[0], ids[1]
        r.times[f"{final}_at"] = at
        stored = await self.call(self.store.get_batch, r.id, None)
        if stored is not None:  # its counts, whatever a cancel interrupted
            r.completed, r.failed = stored.completed, stored.failed
        logger.info(
            "batch %s: %s (%d completed, %d failed of %d)",
            r.id,
            final,
            r.completed,
            r.failed,
            r.total,
        )


def places(endpoint: str, pending: PendingRequest) -> int:
    """The queue places a request takes: its choices (``n``); an embedding
    request goes to the embedding lane, one place of the batch."""
    n = pending.body.get("n") if endpoint != "/v1/embeddings" else None
    return n if isinstance(n, int) and n > 1 else 1


def _final(record: BatchRecord) -> BatchStatus:
    """What a batch that reached its end (or was finalizing when the gateway
    stopped) ends as: its cancel or its expiry, once begun, decided it."""
    if "cancelling_at" in record.times:
        return "cancelled"
    if "expired_at" in record.times:
        return "expired"
    return "completed"
