"""Each fair-pool producer's service against its max-min fair share, given
when it had work (docs/design.md §8.4).

The reference is fluid, hierarchical processor sharing over the pool's
capacity, with demand read from the records: at every instant the capacity
the pool has (the device running a pool job, or idle while a pool job waits:
a work-conserving policy could have used that time) is split equally among
the pool's classes that have work queued or running, then among each class's
producers with work, then down each producer path split at "/" ("swarm/1"
and "swarm/2" share the part of "swarm"), as docs/design.md §4.4
shares it (weights 1). A producer's fair share over a window is what that
split gives it while it has work; the split is max-min fair at every instant
(a producer with no work takes nothing, the others divide its part), so
integrated it is the max-min fair share given each producer's demand,
including producers that have work only part of the time: a one-job-at-a-time
producer waiting for the device is owed its part for every second it waits.

Demand is read from the run being measured, so a policy that delays a job
lengthens the time its producer is owed a part; for a producer whose next job
depends on its last (one at a time) that is exactly right, and for one whose
jobs arrive regardless it counts a long wait behind a job that could not be
stopped as unfairness, bounded by that job's length.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from tierlm.sim.intervals import Interval

__all__ = ["FairShare", "producer_path"]

Node = tuple[str, ...]
_LEAF = "\x00"  # a producer's own leaf, below its path node


def producer_path(class_name: str, producer: str) -> Node:
    """Where a producer sits in the pool's tree: its class, then its path."""
    return (class_name, *producer.split("/"))


class _Cumulative:
    """A node's integral of (capacity x what each present child gets),
    piecewise linear: (time, integral so far, slope from then on)."""

    __slots__ = ("rates", "times", "values")

    def __init__(self) -> None:
        self.times: list[float] = [0.0]
        self.values: list[float] = [0.0]
        self.rates: list[float] = [0.0]

    def set_rate(self, t: float, rate: float) -> None:
        if rate == self.rates[-1]:
            return
        value = self.at(t)
        if t == self.times[-1]:
            self.values[-1], self.rates[-1] = value, rate
        else:
            self.times.append(t)
            self.values.append(value)
            self.rates.append(rate)

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0.0
        return self.values[i] + self.rates[i] * (t - self.times[i])


class FairShare:
    """The fair share of every producer, over any window (module docstring)."""

    def __init__(
        self,
        presence: Mapping[str, Sequence[Interval]],
        class_of: Mapping[str, str],
        capacity: Sequence[Interval],
    ) -> None:
        """``presence``: merged intervals in which each producer had a job
        queued or running; ``class_of``: each producer's class; ``capacity``:
        merged intervals in which the pool had the device."""
        self._presence = {p: list(iv) for p, iv in presence.items()}
        paths = {p: producer_path(class_of[p], p) for p in presence}
        inner: set[Node] = {()}
        for path in paths.values():
            inner.update(path[:i] for i in range(1, len(path)))
        # A producer's leaf hangs below its own path node if other producers
        # extend that path, else below its parent (no node of its own).
        self._parent: dict[Node, Node] = {}
        self._leaf_parent: dict[str, Node] = {}
        for p, path in paths.items():
            self._leaf_parent[p] = path if path in inner else path[:-1]
        for node in inner:
            if node:
                self._parent[node] = node[:-1]
        self._cumulative: dict[Node, _Cumulative] = {node: _Cumulative() for node in inner}
        self._sweep(capacity)
        self._prefix = {p: self._prefix_sums(p) for p in self._presence}

    def _sweep(self, capacity: Sequence[Interval]) -> None:
        events: list[tuple[float, int, str]] = []
        for p, intervals in self._presence.items():
            for start, end in intervals:
                events.append((start, 1, p))
                events.append((end, -1, p))
        for start, end in capacity:
            events.append((start, 2, ""))
            events.append((end, -2, ""))
        events.sort(key=lambda e: e[0])
        present: dict[Node, int] = {}  # present children per inner node
        children: dict[Node, list[Node]] = {}
        for node, parent in self._parent.items():
            children.setdefault(parent, []).append(node)
        cap = 0
        i = 0
        while i < len(events):
            t = events[i][0]
            while i < len(events) and events[i][0] == t:
                _t, kind, p = events[i]
                if abs(kind) == 2:
                    cap += 1 if kind > 0 else -1
                else:
                    self._change(present, self._leaf_parent[p], kind)
                i += 1
            self._rates(t, present, children, 1.0 if cap > 0 else 0.0)

    def _change(self, present: dict[Node, int], node: Node, delta: int) -> None:
        """A child of ``node`` appeared (+1) or left (-1); propagate upwards."""
        while True:
            before = present.get(node, 0)
            after = before + delta
            present[node] = after
            if not node or (before > 0) == (after > 0):
                return
            node = self._parent[node]

    def _rates(
        self, t: float, present: dict[Node, int], children: dict[Node, list[Node]], cap: float
    ) -> None:
        stack: list[tuple[Node, float]] = [((), cap)]
        while stack:
            node, share = stack.pop()
            count = present.get(node, 0)
            rate = share / count if count > 0 else 0.0
            self._cumulative[node].set_rate(t, rate)
            for child in children.get(node, ()):
                if present.get(child, 0) > 0 or self._cumulative[child].rates[-1] != 0.0:
                    stack.append((child, rate if present.get(child, 0) > 0 else 0.0))

    def _prefix_sums(self, producer: str) -> list[float]:
        cumulative = self._cumulative[self._leaf_parent[producer]]
        sums = [0.0]
        for start, end in self._presence[producer]:
            sums.append(sums[-1] + cumulative.at(end) - cumulative.at(start))
        return sums

    def owed(self, producer: str, t: float) -> float:
        """The producer's fair share from 0 to ``t``."""
        intervals = self._presence.get(producer)
        if not intervals:
            return 0.0
        i = bisect.bisect_right(intervals, (t, float("inf"))) - 1
        if i < 0:
            return 0.0
        start, end = intervals[i]
        cumulative = self._cumulative[self._leaf_parent[producer]]
        inside = cumulative.at(min(end, t)) - cumulative.at(start)
        return self._prefix[producer][i] + inside

    def fair(self, producer: str, start: float, end: float) -> float:
        """The producer's fair share over [start, end]."""
        return self.owed(producer, end) - self.owed(producer, start)
