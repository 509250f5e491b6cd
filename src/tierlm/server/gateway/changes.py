"""Scheduler events as something live views can wait on.

Every scheduler event bumps ``version``; a live view (the dashboard's stream)
waits for it to change (``changed``). A waiting request's stream that shows its
queue position ``watch``-es: after events, at most every ``POSITION_INTERVAL``,
the positions are looked up once (``Scheduler.queue_positions``) and the
streams whose shown place changed are woken, and only they. Nothing here copies
the queue: the positions are the scheduler's, looked up at most every
``POSITION_INTERVAL`` (``position``). The cadence was measured when the
look-up (``Policy.queue_order``) still moved the policy's pool floor: 1 000
streams of 4 tokens took 74-84 s to serve with look-ups spaced to 5 % of the
loop against 66 s every 0.25 s. The look-up is a pure query now
(docs/design.md §2.6); the cadence stays until measured again.

Why only they: waking every waiting stream after every burst of events made
the loop's work per event grow with the idle queued streams. At 1 000 queued,
4 000 wake-ups a second each wrote nothing new (a place far back is shown
rounded, ``shown_position``, and stays the same as jobs start), and the
gateway's loop lag p99 lay in 100-250 ms (docs/design.md §1.11). A stream
``wake`` that carries its job's id (``JobWake``) is woken when what it would
show changes; any other ``asyncio.Event`` is woken as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping

from tierlm.shell.events import SchedulerEvent

__all__ = [
    "EXACT_POSITIONS",
    "POSITION_INTERVAL",
    "WAKE_BATCH",
    "Changes",
    "JobWake",
    "Positions",
    "shown_position",
]

Positions = Mapping[int, tuple[int, int]]
"""{job id: (effective tier, place in the queue)}: ``Scheduler.queue_positions``."""

# Positions up to this are shown exactly; beyond, rounded up (see shown_position).
EXACT_POSITIONS = 10


def shown_position(position: int) -> int:
    """The queue position a waiting stream is told: exact up to
    EXACT_POSITIONS, then rounded up to a multiple of 10, and of 50 past 100.

    Every job that starts moves every waiting job up one place; with hundreds
    waiting, exact positions cost a write to every stream per start (the
    gateway benchmark's 500 streams read 46 000 such lines for 10 600 tokens).
    Far back in the queue, "about 120" says all a person needs.
    """
    if position <= EXACT_POSITIONS:
        return position
    step = 10 if position <= 100 else 50
    return -(-position // step) * step


def _shown(where: tuple[int, int] | None) -> tuple[int, int] | None:
    """What a stream shows of ``where``: its tier and rounded place."""
    return None if where is None else (where[0], shown_position(where[1]))


class JobWake(asyncio.Event):
    """A stream's wake-up that knows its job, so that ``Changes`` wakes it
    only when the place it shows changes (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.job_id: int | None = None
        """Set once the job is submitted."""


_UNTOLD = object()

# How often, at most, waiting streams are told a new position: a person reading
# "waiting behind 3 jobs" needs a few updates a second, not one per event. With
# hundreds queued, every start moves them all, and waking each per event costs
# O(queue^2) wake-ups and writes.
POSITION_INTERVAL = 0.25
WAKE_BATCH = 50
"""Waiting streams woken in one turn of the event loop; the rest in the next
turns. Each wake-up writes its stream a comment (~0.5 ms); waking 500 in one
turn held the loop for 0.2-0.4 s under the gateway benchmark, every token and
timer waiting behind them (docs/design.md §1.11). 50 is ~25 ms a turn,
and the 500th stream still hears within a tenth of a second."""


class Changes:
    """The version of the scheduler's state, and the streams watching it."""

    def __init__(self) -> None:
        self.version = 0
        """Bumped on every scheduler event."""
        self.closing = False
        """Shutting down: live views end."""
        self._changed = asyncio.Event()
        self._watchers: set[asyncio.Event] = set()
        self._tick: asyncio.TimerHandle | None = None  # the next wake-up round
        self.loop: asyncio.AbstractEventLoop | None = None
        """The app's loop, once started."""
        self._positions: Positions = {}
        self._positions_at = -POSITION_INTERVAL  # loop time of that look-up
        self._positions_version = -1  # ``version`` at that look-up
        self._late: set[asyncio.Event] = set()  # to wake at the next look-up allowed
        self._look_up: Callable[[], Positions] | None = None  # the streams' (``position``)
        self._told: dict[asyncio.Event, object] = {}
        """What each watching stream was last answered (``_shown``)."""

    def start(self) -> None:
        """Bind to the running loop (the app's lifespan)."""
        self.loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def on_event(self, event: SchedulerEvent) -> None:
        self.version += 1
        self._changed.set()
        if self._watchers and self.loop is not None:
            self._tick_at(self.loop.time() + POSITION_INTERVAL)

    def _tick_at(self, when: float) -> None:
        """One round of wake-ups at ``when``, unless one is already due."""
        if self._tick is None and self.loop is not None:
            self._tick = self.loop.call_at(when, self._wake_watchers)

    def _wake_watchers(self) -> None:
        """Look the positions up (at most every ``POSITION_INTERVAL``), then wake the
        watching streams whose shown place changed, a batch a turn."""
        self._tick = None
        look_up, loop = self._look_up, self.loop
        if look_up is not None and loop is not None and self._positions_version != self.version:
            allowed = self._positions_at + POSITION_INTERVAL
            if loop.time() < allowed:
                self._tick_at(allowed)
                return
            self._refresh(look_up, loop.time())
        waiting = self._watchers | self._late
        self._late = set()
        self._wake_some(iter(self._changed_for(waiting)))

    def _changed_for(self, waiting: set[asyncio.Event]) -> list[asyncio.Event]:
        """The streams of ``waiting`` that would show something new (a dict
        look-up a stream); those that do not know their job, all."""
        if self._look_up is None:
            return list(waiting)
        positions, told = self._positions, self._told
        woken: list[asyncio.Event] = []
        for wake in waiting:
            job_id = getattr(wake, "job_id", None)
            if job_id is None or told.get(wake, _UNTOLD) != _shown(positions.get(job_id)):
                woken.append(wake)
        return woken

    def _refresh(self, look_up: Callable[[], Positions], now: float) -> None:
        self._positions = look_up()
        self._positions_at = now
        self._positions_version = self.version

    def _wake_some(self, waiting: Iterator[asyncio.Event]) -> None:
        # WAKE_BATCH a loop turn, the rest in the next turns (WAKE_BATCH).
        batch = list(itertools.islice(waiting, WAKE_BATCH))
        for wake in batch:
            wake.set()
        if len(batch) == WAKE_BATCH and self.loop is not None:
            self.loop.call_soon(self._wake_some, waiting)

    def watch(self, wake: asyncio.Event) -> None:
        """Set ``wake`` after the next events (throttled), until ``unwatch``."""
        self._watchers.add(wake)

    def unwatch(self, wake: asyncio.Event) -> None:
        self._watchers.discard(wake)
        self._late.discard(wake)
        self._told.pop(wake, None)

    def position(
        self, job_id: int, wake: asyncio.Event, look_up: Callable[[], Positions]
    ) -> tuple[int, int] | None:
        """Where ``job_id`` waits, from ``look_up`` (the policy's dispatch order)
        called at most every ``POSITION_INTERVAL``; between, the last answer.

        Every admission changes the queue, so looking up per stream start costs
        O(queue log queue) each: 500 requests arriving together held the event
        loop for seconds (bench/gateway_load.py; docs/design.md §2.6). A job the
        last answer does not know yet (it arrived since) gets None, and ``wake``
        is set when the next look-up is allowed if its place shows otherwise
        then; so is any stream given an answer older than the last event.
        """
        loop = self.loop
        if loop is None:  # not started (a test's bare gateway): no throttle
            return look_up().get(job_id)
        self._look_up = look_up
        now = loop.time()
        next_allowed = self._positions_at + POSITION_INTERVAL
        if now >= next_allowed:
            self._refresh(look_up, now)
            where = self._positions.get(job_id)
        else:
            where = self._positions.get(job_id)
            if where is None or self._positions_version != self.version:
                self._late.add(wake)
                self._tick_at(next_allowed)
        self._told[wake] = _shown(where)
        return where

    def close(self) -> None:
        """Live views end (they check ``closing`` when woken)."""
        self.closing = True
        self._changed.set()

    async def changed(self, version: int, timeout: float) -> int:
        """Wait until an event after ``version`` (or ``timeout``); the new version."""
        if self.version == version and not self.closing:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version
