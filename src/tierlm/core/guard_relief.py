"""The chat latency guard is bounded (docs/design.md §4.7 (guard relief)).

The guard cuts background out of a person's batch. While real people keep the
device busy without a pause, one after another, it would cut background for
good. Once people's work has held the device for ``GUARD_SPAN`` seconds with
no pause of ``PAUSE`` or more, and two people or more took part in it, the
guard keeps one background sequence in the batch (on a device of two slots or
more) until people pause again: background keeps at least one slot of k, and
a person's step time is the curve's at their batch plus one. One person who
reads pauses; one who does not is a program (docs/design.md §4.11), or a
test sending chats back to back, and is never relieved against.
"""

from __future__ import annotations

__all__ = ["GUARD_SPAN", "PAUSE", "GuardRelief"]

GUARD_SPAN = 30.0
"""Seconds of people's work without a pause before the guard keeps one
background slot: ``chat_grace``'s 30 s, the longest one person is taken to
be typing their next message; past it, more than one person is at work."""

PAUSE = 3.0
"""A pause in people's work this long ends a busy stretch: a person who reads
a short answer takes at least this long (docs/design.md §4.11)."""


class GuardRelief:
    """Tracks the current stretch of people's work (module docstring)."""

    __slots__ = ("_busy", "_busy_since", "_last_busy", "_people", "pause", "span")

    def __init__(self, span: float = GUARD_SPAN, pause: float = PAUSE) -> None:
        self.span = span
        self.pause = pause
        self._busy_since: float | None = None
        self._last_busy: float | None = None
        self._busy = False  # as last told: it holds until the next update
        self._people: set[object] = set()  # who started a chat in this stretch (two do)

    def update(self, now: float, people_busy: bool) -> None:
        """A person's sequence runs or waits (``people_busy``) at ``now``, or not.
        Told at each decision: busy at the last one, busy until this one."""
        if self._busy:
            self._last_busy = now
        self._busy = people_busy
        if people_busy:
            if self._last_busy is None or now - self._last_busy >= self.pause:
                self._busy_since = now  # a new stretch
                self._people.clear()
            self._last_busy = now
        elif self._last_busy is not None and now - self._last_busy >= self.pause:
            self._busy_since = self._last_busy = None
            self._people.clear()

    def chat_started(self, person: object) -> None:
        """A person's chat started (``Job.chat_person``)."""
        if len(self._people) < 2:
            self._people.add(person)

    def relieved(self, now: float) -> bool:
        """Whether the guard keeps one background slot now."""
        if self._busy_since is None or len(self._people) < 2:
            return False
        return now - self._busy_since >= self.span

    def step(self, now: float, people_busy: bool, slots: int, wake: list[float]) -> bool:
        """``update``, then whether the guard keeps one background slot now
        (never on one slot: there a person always comes first); adds to
        ``wake`` when it will."""
        if slots < 2:
            return False
        self.update(now, people_busy)
        at = self.relief_at(now)
        if at is not None:
            wake.append(at)
        return self.relieved(now)

    def relief_at(self, now: float) -> float | None:
        """When the current stretch earns relief, if it has not yet."""
        if self._busy_since is None or len(self._people) < 2:
            return None
        at = self._busy_since + self.span
        return at if at > now else None
