"""When the Dispatcher decides next, besides at each event: at the time the
policy asked to be woken (``Decision.wake_at``), once after the events of
an instant, and soon after a callback that must not decide inside a
runner's stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["DecisionClock"]


class DecisionClock:
    """Arms at most one timer, and at most one decision per instant."""

    def __init__(self, decide: Callable[[], None]) -> None:
        self._decide = decide
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: float | None = None
        self._due = False  # a decision for this instant's submissions is queued

    def arm(self, now: float, when: float | None) -> None:
        """Wake at ``when`` (None: no timer)."""
        if when is not None and when <= now:
            # A policy must report future times only; waking at `now` again would
            # spin forever at one instant (a livelock on a virtual clock).
            when = None
        if when == self._timer_when:
            return
        self.cancel()
        if when is not None:
            assert self.loop is not None
            self._timer_when = when
            self._timer = self.loop.call_at(when, self._on_timer)

    def this_instant(self) -> None:
        """Decide once the events of this instant are all in (docs/design.md
        §4.7 (persons in turn on slots))."""
        if not self._due and self.loop is not None:
            self._due = True
            self.loop.call_soon(self._on_due)

    def soon(self) -> None:
        """Decide once the current callback returns (not inside a runner's stream)."""
        if self.loop is not None:
            self.loop.call_soon(self._decide)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_when = None

    def _on_timer(self) -> None:
        self._timer = self._timer_when = None
        self._decide()

    def _on_due(self) -> None:
        self._due = False
        self._decide()
