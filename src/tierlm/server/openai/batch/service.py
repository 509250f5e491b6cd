"""The Batch API as the app runs it: the store, the batches running, resuming.

``create_app`` makes one ``BatchService``; its lifespan starts it (every
unfinished batch in the store resumes: docs/gateway.md "Batches") and closes
it (the runs stop; what they did not answer stays pending in the store).
Every store call runs off the event loop (``asyncio.to_thread``): the loop
runs the scheduler.

``open`` claims the data directory (one gateway per directory: a lock,
``data_dir``) and opens the store, creating it if missing, at start-up:
``tierlm serve`` calls it before it listens, so a directory in use, read-only
or holding a corrupt file is one line naming the path and the gateway does
not start (docs/design.md §9), instead of starting and answering every Batch
call with a 500.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tierlm.runners.protocol import abilities_of
from tierlm.server.gateway.embedding_lane import EmbeddingService
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.openai.batch.data_dir import DataDirLock
from tierlm.server.openai.batch.metrics import BatchMetrics
from tierlm.server.openai.batch.run import BatchRun
from tierlm.server.openai.batch.sqlite_store import SqliteStore
from tierlm.server.openai.batch.store import BatchRecord, BatchStore
from tierlm.server.settings.batches import BatchSettings

__all__ = ["BatchService"]

logger = logging.getLogger("tierlm.server")

T = TypeVar("T")

# Its section in the state API and the dashboard.
_EXTENSION = "batches"
# Finished batches the state keeps for the dashboard.
RECENT = 20


class BatchService:
    """Files and batches (module docstring)."""

    def __init__(self, settings: BatchSettings, gateway: Gateway) -> None:
        self.settings = settings
        self.gateway = gateway
        self.embeddings: EmbeddingService | None = None
        self._store: BatchStore | None = None
        self._lock = DataDirLock(settings.directory())
        self._opening = threading.Lock()
        self.runs: dict[str, BatchRun] = {}
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT)
        self.metrics = BatchMetrics(gateway.metrics.registry, self._counts)
        gateway.extensions[_EXTENSION] = self.table
        self._closed = False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread (a store method)."""
        return await asyncio.to_thread(functools.partial(fn, *args))

    def open(self) -> BatchStore:
        """Claim the data directory and open the store (module docstring);
        ``StoreError`` with a one-line message naming the path otherwise."""
        with self._opening:
            if self._store is None:
                self._lock.claim()
                path = self.settings.database()
                try:
                    self._store = SqliteStore(path)
                except BaseException:
                    self._lock.release()
                    raise
                logger.debug("batches: stored in %s", path)
            return self._store

    async def store(self) -> BatchStore:
        """The store, opened at start."""
        if self._store is None:
            return await self.call(self.open)
        return self._store

    async def start(self) -> None:
        """Open the store (if ``tierlm serve`` has not) and resume every unfinished batch."""
        store = await self.store()
        unfinished = await self.call(store.unfinished)
        for record in unfinished:
            self.launch(record, resumed=True)
        if unfinished:
            left = sum(r.total - r.completed - r.failed for r in unfinished)
            logger.info("batches: resuming %d unfinished (%d requests left)", len(unfinished), left)

    async def aclose(self) -> None:
        self._closed = True
        tasks = [run.task for run in self.runs.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._store is not None:
            await self.call(self._store.close)
            self._store = None
        self._lock.release()

    @property
    def in_flight(self) -> int:
        """A batch's jobs in the scheduler at once (``batches.in_flight``;
        unset: twice the device's slots)."""
        configured = self.settings.in_flight
        return configured if configured is not None else 2 * abilities_of(self.gateway.runner).slots

    def launch(self, record: BatchRecord, *, resumed: bool = False) -> None:
        """Run ``record`` (new, or ``resumed`` after a restart) until its final status."""
        assert self._store is not None
        run = BatchRun(
            record,
            self._store,
            self.call,
            self.gateway,
            self.embeddings,
            self.in_flight,
            self.metrics.request_done,
        )
        self.runs[record.id] = run
        self.metrics.batch_status("resumed" if resumed else "created")
        run.start()
        assert run.task is not None
        run.task.add_done_callback(lambda _: self._ended(run))

    def _ended(self, run: BatchRun) -> None:
        if self.runs.get(run.record.id) is run:
            del self.runs[run.record.id]
        if run.record.status in ("completed", "expired", "cancelled", "failed"):
            self.metrics.batch_status(run.record.status)
            self.recent.appendleft(summary(run.record, 0))

    def live(self, record: BatchRecord) -> BatchRecord:
        """The running copy of ``record`` if it runs (its counts are current)."""
        run = self.runs.get(record.id)
        return run.record if run is not None else record

    def _counts(self) -> tuple[int, int]:
        """Batches running, and their requests in the scheduler."""
        return len(self.runs), sum(len(run.running) for run in self.runs.values())

    def table(self) -> dict[str, Any]:
        """The state API's and the dashboard's ``batches`` section: flat, as the
        dashboard shows a section (a table): the counts, then a row per
        running batch with its progress. ``state`` has the details."""
        rows: dict[str, Any] = {
            "running": len(self.runs),
            "requests_in_flight": self._counts()[1],
        }
        for run in self.runs.values():
            r = run.record
            done = r.completed + r.failed
            rows[r.id] = f"{r.status}: {done} of {r.total} done ({r.failed} failed), {r.class_name}"
        return rows

    def state(self) -> dict[str, Any]:
        """``GET /v1/scheduler/batches``: every running batch with its progress,
        then the last finished ones."""
        return {
            "in_flight_per_batch": self.in_flight,
            "running": [summary(run.record, len(run.running)) for run in self.runs.values()],
            "recent": list(self.recent),
        }


def summary(record: BatchRecord, in_flight: int) -> dict[str, Any]:
    """What a dashboard draws of one batch: a progress bar and its due time."""
    done = record.completed + record.failed
    return {
        "id": record.id,
        "owner": record.owner or None,
        "status": record.status,
        "endpoint": record.endpoint,
        "model": record.model,
        "class": record.class_name,
        "producer": record.producer,
        "request_counts": {
            "total": record.total,
            "completed": record.completed,
            "failed": record.failed,
        },
        "progress": done / record.total if record.total else 1.0,
        "in_flight": in_flight,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "overdue_from": record.deadline,
        "times": dict(record.times),
    }
