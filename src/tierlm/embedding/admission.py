"""The embedding lane's bounded queue: admission, pushback in arrival order,
and texts dropped when their caller leaves (docs/design.md §5)."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlm.embedding.errors import LaneClosed, LaneFull
from tierlm.embedding.stats import LaneCounters

if TYPE_CHECKING:
    from tierlm.embedding.embedders import Vector

__all__ = ["QueuedText", "TextQueue"]

# Dropped texts stay in the queue (a deque has no cheap removal) until this many
# pile up and they outnumber the live ones; then the queue is rebuilt.
_COMPACT_MIN_DEAD = 64


class TextState(enum.Enum):
    NEW = "new"
    QUEUED = "queued"
    STARTED = "started"
    DROPPED = "dropped"


class QueuedText:
    """One text of one caller, with the future its vector goes to."""

    __slots__ = ("enqueued", "future", "state", "submitted", "text")

    def __init__(self, text: str, future: asyncio.Future[Vector], submitted: float) -> None:
        self.text = text
        self.future = future
        self.submitted = submitted
        self.enqueued = submitted
        self.state = TextState.NEW


class TextQueue:
    """At most ``max_queue`` texts waiting for a batch, oldest first.

    A caller that finds no room waits (pushback) in arrival order: room that
    appears goes straight to the oldest waiter (its text is queued for it), so
    a caller arriving later cannot overtake one that waits. ``on_enqueue`` is
    called with the number of queued texts after each text is queued.
    """

    def __init__(
        self, max_queue: int, counts: LaneCounters, on_enqueue: Callable[[int], None]
    ) -> None:
        self.max_queue = max_queue
        self.live = 0
        """Texts queued (not dropped) now."""
        self._counts = counts
        self._on_enqueue = on_enqueue
        self._queue: deque[QueuedText] = deque()
        self._dead = 0  # DROPPED items still in _queue
        self._waiters: deque[tuple[asyncio.Future[None], QueuedText]] = deque()

    def waiting_callers(self) -> int:
        return sum(1 for waiter, _ in self._waiters if not waiter.done())

    def _room(self) -> int:
        return self.max_queue - self.live

    async def admit(
        self, items: list[QueuedText], nowait: bool, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Queue ``items``: all or none at once with ``nowait`` (else
        :class:`LaneFull`), or each as room appears."""
        if nowait:
            if self._waiters or self._room() < len(items):
                self._counts.rejected += len(items)
                raise LaneFull(
                    f"embedding queue full: {self.live}/{self.max_queue} texts queued, "
                    f"{len(items)} offered"
                )
            for item in items:
                self._enqueue(item, loop)
            return
        i = 0
        while i < len(items):
            # Callers already waiting go first: no overtaking the pushed back.
            room = 0 if self._waiters else self._room()
            if room > 0:
                for item in items[i : i + room]:
                    self._enqueue(item, loop)
                i += room
                continue
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((waiter, items[i]))
            self._counts.pushbacks += 1
            try:
                # Resolved once items[i] has been queued for us.
                await waiter
            except BaseException:
                if waiter.cancelled():  # cancelled while waiting: leave the line
                    # (unless a wake-up already skipped over it)
                    with contextlib.suppress(ValueError):
                        self._waiters.remove((waiter, items[i]))
                # Anything of ours already queued is dropped by the caller's abandon().
                raise
            i += 1

    def _enqueue(self, item: QueuedText, loop: asyncio.AbstractEventLoop) -> None:
        item.state = TextState.QUEUED
        item.enqueued = loop.time()
        self._queue.append(item)
        self.live += 1
        self._counts.accepted += 1
        self._counts.peak_queue = max(self._counts.peak_queue, self.live)
        self._on_enqueue(self.live)

    def _wake_waiters(self) -> None:
        while self._waiters and self._room() > 0:
            waiter, item = self._waiters.popleft()
            if waiter.done():  # cancelled while waiting
                continue
            self._enqueue(item, asyncio.get_running_loop())
            waiter.set_result(None)

    def abandon(self, items: list[QueuedText]) -> None:
        """The caller of ``items`` is gone (cancelled, or one of its texts failed)."""
        freed = False
        for item in items:
            future = item.future
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved: no "exception never retrieved" warning
            if item.state is TextState.QUEUED:
                item.state = TextState.DROPPED
                self.live -= 1
                self._dead += 1
                self._counts.dropped += 1
                freed = True
        if freed:
            if self._dead >= _COMPACT_MIN_DEAD and self._dead > self.live:
                self._queue = deque(i for i in self._queue if i.state is TextState.QUEUED)
                self._dead = 0
            self._wake_waiters()

    def oldest(self) -> QueuedText | None:
        while self._queue and self._queue[0].state is TextState.DROPPED:
            self._queue.popleft()
            self._dead -= 1
        return self._queue[0] if self._queue else None

    def take(self, max_batch: int) -> list[QueuedText]:
        """Up to ``max_batch`` texts, oldest first, marked started."""
        batch: list[QueuedText] = []
        while self._queue and len(batch) < max_batch:
            item = self._queue.popleft()
            if item.state is TextState.DROPPED:
                self._dead -= 1
                continue
            item.state = TextState.STARTED
            self.live -= 1
            batch.append(item)
        if batch:
            self._wake_waiters()
        return batch

    def refuse_waiters(self, message: str) -> None:
        """Fail every pushed-back caller with :class:`LaneClosed`."""
        while self._waiters:
            waiter, _ = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(LaneClosed(message))

    def drop_all(self, message: str, cause: BaseException | None = None) -> None:
        """Fail every queued text with :class:`LaneClosed` and empty the queue."""
        for item in self._queue:
            if item.state is TextState.QUEUED:
                item.state = TextState.DROPPED
                self._counts.dropped += 1
                if not item.future.done():
                    failure = LaneClosed(message)
                    failure.__cause__ = cause
                    item.future.set_exception(failure)
        self._queue.clear()
        self.live = self._dead = 0
