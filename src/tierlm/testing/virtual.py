"""A virtual-time asyncio event loop: time jumps to the next timer when all wait.

Everything time-dependent in tierlm is tested on this loop (docs/design.md §7): a test of
a 5-minute budget window takes milliseconds and never flakes, because nothing
sleeps on the wall clock.

How it works: asyncio's ``_run_once`` computes how long to block in the selector
until the earliest timer, then asks the selector to wait that long. Our selector
does not wait; it advances the loop's clock by exactly that timeout and reports
no I/O. The loop then finds the timer due and runs it. When nothing is ready and
no timer is set, every task is waiting for something that can never happen: the
selector raises :class:`VirtualDeadlock` instead of hanging.

We wrote this (about 60 lines) rather than depend on ``looptime``, which patches
loops through pytest fixtures; tierlm's simulator and CLI need the same loop
outside pytest, with deadlock detection.

Limits: real I/O (sockets, subprocesses) and ``run_in_executor`` do not work on
this loop, since the selector never really waits. Use it for code that only
waits on timers, futures and events.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualDeadlock", "VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class VirtualDeadlock(RuntimeError):
    """Every task waits, and no timer will ever wake one of them."""


class _VirtualSelector(selectors.SelectSelector):
    def __init__(self) -> None:
        super().__init__()
        self.clock = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise VirtualDeadlock("virtual time: all tasks are waiting and no timer is scheduled")
        # asyncio caps one wait at 24 h (MAXIMUM_SELECT_TIMEOUT); the loop simply
        # comes back for the rest, so any timeout is exact.
        self.clock += max(0.0, timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual and starts at ``start``."""

    def __init__(self, start: float = 0.0) -> None:
        self._virtual = _VirtualSelector()
        self._virtual.clock = start
        super().__init__(self._virtual)
        # asyncio warns when one callback runs > 0.1 s of *wall* time; in virtual
        # time that measure is meaningless.
        self.slow_callback_duration = float("inf")

    def time(self) -> float:
        return self._virtual.clock

    def block(self, seconds: float) -> None:
        """What a callback that holds the loop for ``seconds`` (a synchronous
        call, a long parse) looks like to everything else on it: called from
        that callback, the clock moves on ``seconds`` while nothing else runs."""
        if seconds < 0:
            raise ValueError(f"a loop cannot be held for {seconds} s")
        self._virtual.clock += seconds


def run_virtual(coro: Coroutine[Any, Any, T], *, start: float = 0.0) -> T:
    """Run ``coro`` to completion on a fresh virtual-time loop and return its result.

    ``asyncio.sleep(300)`` inside returns at once with ``loop.time()`` 300 s later.
    Raises :class:`VirtualDeadlock` if every task waits forever.
    """
    loop = VirtualTimeLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
