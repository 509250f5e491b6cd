"""Rolling-window accounting of busy device time for a budgeted class.

docs/design.md §4.3: a class's share is its busy time over all busy time in the
last ``window`` seconds, counted continuously, including the running job's
elapsed time (not only at completion, or one long job could overrun the cap
unseen). Idle time counts for no one.

One device runs one job at a time, so busy intervals never overlap and arrive in
order: at most one interval straddles the window's start. Keeping running sums
and trimming from the left makes every query O(1) amortised. With k slots a
span carries the class's part of the running set (docs/design.md §4.7).

``Budgets`` holds every budgeted class's meter and cap, and answers which of
them the picker skips now.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Job

__all__ = ["BudgetMeter", "Budgets"]


class BudgetMeter:
    """Busy time of one class against all busy time, over a rolling window."""

    __slots__ = ("_intervals", "_mine_total", "_running", "_total", "_usage", "window")

    def __init__(self, window: float) -> None:
        self.window = window
        # (start, end, mine) of ended busy spans, oldest first; ``mine`` is the
        # class's part of the device over the span (0..1: with k slots, its
        # share of the sequences running, docs/design.md §4.7).
        self._intervals: deque[tuple[float, float, float]] = deque()
        self._total = 0.0
        self._mine_total = 0.0
        self._running: tuple[float, float] | None = None
        # ``usage`` at one instant, asked several times by one decision (the
        # floor, the budgets, each rank): kept until the instant or the
        # spans change.
        self._usage: tuple[float, tuple[float, float]] | None = None

    def start(self, now: float, mine: float) -> None:
        """The device is busy from ``now``, ``mine`` of it this class's (1 or 0
        with one slot; a job was dispatched, its swap included). Called again
        when the running set changes: the span so far is closed at its share."""
        if self._running is not None:
            self.stop(now)
            self._usage = None
        elif self._usage is not None and self._usage[0] != now:
            self._usage = None
        # Else the usage known at ``now`` stands: a span from ``now`` adds
        # nothing to it (``usage`` counts ``now - start``, 0, only if > 0).
        self._running = (now, float(mine))

    def stop(self, now: float) -> None:
        """The device is idle from ``now``."""
        if self._running is None:
            return
        start, mine = self._running
        self._running = None
        self._usage = None
        if now > start:
            self._intervals.append((start, now, mine))
            self._total += now - start
            self._mine_total += (now - start) * mine

    def usage(self, now: float) -> tuple[float, float]:
        """(this class's busy seconds, all busy seconds) in ``(now - window, now]``."""
        known = self._usage
        if known is not None and known[0] == now:
            return known[1]
        cutoff = now - self.window
        intervals = self._intervals
        if intervals and intervals[0][1] <= cutoff:
            # The spans that left the window (else none did, and an empty
            # deque's sums are already 0.0).
            while intervals and intervals[0][1] <= cutoff:
                start, end, mine = intervals.popleft()
                self._total -= end - start
                self._mine_total -= (end - start) * mine
            if not intervals:
                # Re-zero to shed floating-point drift from long add/subtract chains.
                self._total = self._mine_total = 0.0
        mine_total, total = self._mine_total, self._total
        if intervals:
            start, _end, mine = intervals[0]
            if start < cutoff:  # the one interval that straddles the window start
                total -= cutoff - start
                mine_total -= (cutoff - start) * mine
        if self._running is not None:
            start, mine = self._running
            part = now - max(start, cutoff)
            if part > 0:
                total += part
                mine_total += part * mine
        # ``max(0.0, x)`` each, without the calls (0.0 unless x > 0.0).
        usage = (mine_total if mine_total > 0.0 else 0.0, total if total > 0.0 else 0.0)
        self._usage = (now, usage)
        return usage

    def share(self, now: float) -> float:
        """This class's share of busy time in the window (0 when nothing ran)."""
        mine, total = self.usage(now)
        return mine / total if total > 0 else 0.0


class Budgets:
    """The budgeted classes' meters and caps (docs/design.md §4.3, §4.7)."""

    __slots__ = ("_caps", "_meters", "_sets", "any", "names")

    def __init__(self, classes: Mapping[str, TaskClass]) -> None:
        self._meters = {
            name: BudgetMeter(c.budget.window) for name, c in classes.items() if c.budget
        }
        self._caps = {name: c.budget.share for name, c in classes.items() if c.budget}
        self.names = frozenset(self._meters)
        """Every budgeted class."""
        self.any = bool(self._meters)
        """Whether any class is budgeted (``bool(self)``, as an attribute)."""
        # ``skipped``'s answers, one object per set of names: a decision's
        # caches compare the set it skips, by identity first.
        self._sets: dict[tuple[str, ...], frozenset[str]] = {(): frozenset()}

    def __bool__(self) -> bool:
        return bool(self._meters)

    def remix(self, now: float, running: Collection[Job]) -> None:
        """The running set changed: each class counts its part of it from now
        (slot-time; with one slot the running job's class has all of it)."""
        if not running:
            for meter in self._meters.values():
                meter.stop(now)
            return
        names = []  # one pass, counted in C per meter
        for job in running:
            names.append(job.task_class.name)
        for name, meter in self._meters.items():
            meter.start(now, names.count(name) / len(names))

    def over(self, now: float, running: Collection[Job], joining: bool) -> list[str]:
        """The classes past their cap now. ``joining``: for a free slot beside
        ``running``, also those whose part of the batch would pass their cap
        with one more (docs/design.md §4.7 (budgets in a batch): the meter sees a
        filled batch only as its span runs, so k sequences started at once
        would overrun the cap by k jobs' length before it could say so)."""
        caps = self._caps
        over = []
        for name, meter in self._meters.items():
            mine, total = meter.usage(now)  # ``share``, inlined (every decision)
            if total > 0 and mine / total > caps[name]:
                over.append(name)
        if joining and running:
            names = [j.class_name for j in running]
            for name, cap in caps.items():
                part = names.count(name) + 1
                if name not in over and part / (len(running) + 1) > cap:
                    over.append(name)
        return over

    def skipped(self, now: float, running: Collection[Job], joining: bool) -> frozenset[str]:
        """``over`` as a set, the same object for the same names."""
        if joining and running:
            over = tuple(self.over(now, running, joining))
        else:  # ``over``'s first loop alone, inlined (every decision asks)
            caps = self._caps
            over = ()
            for name, meter in self._meters.items():
                mine, total = meter.usage(now)
                if total > 0 and mine / total > caps[name]:
                    over += (name,)
        found = self._sets.get(over)
        if found is None:
            found = self._sets[over] = frozenset(over)
        return found

    def shares(self, now: float) -> dict[str, float]:
        return {name: meter.share(now) for name, meter in self._meters.items()}
