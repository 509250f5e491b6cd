"""Ending the gateway: a drain on SIGTERM, or at once.

A drain (``drain``; ``tierlm serve`` on its first SIGTERM or Ctrl-C) stops
accepting: the listening socket closes (uvicorn), and a request that still
arrives on an open connection gets 503 ``shutting_down``. The jobs already
accepted, running or queued, get ``shutdown_grace`` seconds to finish; what is
left then is cancelled (``Cancelled(SHUTDOWN)``, which a client sees as the
``shutting_down`` error). Live views (the dashboard's stream) end at once, so
they do not hold the server open. ``now`` skips the grace (a second signal, or
a test's teardown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.changes import Changes
from tierlm.shell.events import SchedulerEvent
from tierlm.shell.scheduler import Scheduler

__all__ = ["Shutdown", "shutting_down"]

logger = logging.getLogger("tierlm.server")


def shutting_down(what: str) -> APIError:
    """The 503 of a request or a job the shutdown ended."""
    return APIError(
        503, f"the gateway is shutting down; {what}", code="shutting_down", reason="shutting_down"
    )


class Shutdown:
    """The gateway's shutdown: ``draining`` once it began (module docstring)."""

    def __init__(
        self, grace: float, changes: Changes, scheduler: Callable[[], Scheduler | None]
    ) -> None:
        self.grace = grace
        self.draining = False
        """No new requests are accepted."""
        self._changes = changes
        self._scheduler = scheduler
        self._progress = asyncio.Event()
        self._task: asyncio.Future[None] | None = None  # referenced until done

    def on_event(self, event: SchedulerEvent) -> None:
        self._progress.set()

    def drain(self) -> None:
        """Stop accepting; end the accepted jobs within ``grace``, then cancel the rest."""
        if self.draining:
            return
        self.draining = True
        self._changes.close()
        scheduler = self._scheduler()
        if scheduler is not None:
            self._progress = asyncio.Event()
            self._task = asyncio.ensure_future(self._drain(scheduler))

    async def drained(self) -> None:
        """Until the drain (or the ``now``) under way ended."""
        task = self._task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def now(self) -> None:
        """End every job now (queued and running: ``Cancelled(SHUTDOWN)``)."""
        self.draining = True
        self._changes.close()
        scheduler = self._scheduler()
        if scheduler is not None and not scheduler.closed:
            self._task = asyncio.ensure_future(scheduler.aclose())

    async def _drain(self, scheduler: Scheduler) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        while (left := _jobs_left(scheduler)) and loop.time() < deadline:
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), deadline - loop.time())
        if left:
            logger.info(
                "shutdown: %d jobs did not finish within shutdown_grace (%g s); cancelling them",
                left,
                self.grace,
            )
        else:
            logger.info("shutdown: every accepted job finished")
        if not scheduler.closed:
            await scheduler.aclose()


def _jobs_left(scheduler: Scheduler) -> int:
    """Jobs accepted and not ended: queued, and the running one."""
    snap = scheduler.snapshot()
    return snap.queue_depth + (snap.running is not None)
