"""Sets of time intervals, as the metrics need them: merged, intersected,
measured in O(log n) per query."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from tierlm.sim.records import JobRecord

__all__ = [
    "EPS",
    "Coverage",
    "Interval",
    "SharedTime",
    "complement",
    "intersect",
    "merge",
    "presence",
    "runs",
    "subtract",
]

EPS = 1e-9
Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, touching intervals joined."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1] + EPS:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Two merged lists' intersection, merged (linear)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return merge(out)


def complement(a: Sequence[Interval], start: float, end: float) -> list[Interval]:
    """[start, end] minus a merged list."""
    out: list[Interval] = []
    at = start
    for s, e in a:
        if e <= at:
            continue
        if s >= end:
            break
        if s > at:
            out.append((at, s))
        at = max(at, e)
    if at < end:
        out.append((at, end))
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """A merged list minus another."""
    if not a:
        return []
    return intersect(a, complement(b, a[0][0], a[-1][1]))


class Coverage:
    """Time covered by intervals (merged first), with O(log n) queries: how
    much of [start, end] is covered, and whether all of it is."""

    __slots__ = ("_before", "_ends", "_starts")

    def __init__(self, intervals: Iterable[Interval]) -> None:
        merged = merge(intervals)
        self._starts = [a for a, _ in merged]
        self._ends = [b for _, b in merged]
        self._before = [0.0]
        for a, b in merged:
            self._before.append(self._before[-1] + (b - a))

    @property
    def intervals(self) -> list[Interval]:
        return list(zip(self._starts, self._ends, strict=True))

    @property
    def total(self) -> float:
        return self._before[-1]

    def _cumulative(self, t: float) -> float:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return 0.0
        return self._before[i] + min(t, self._ends[i]) - self._starts[i]

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, self._cumulative(end) - self._cumulative(start))

    def covers(self, start: float, end: float) -> bool:
        i = bisect.bisect_right(self._starts, start + EPS) - 1
        return i >= 0 and self._ends[i] >= end - EPS

    def contains(self, t: float) -> bool:
        i = bisect.bisect_right(self._starts, t) - 1
        return i >= 0 and self._ends[i] > t


class SharedTime:
    """Device time of some runs among all, each moment shared equally by the
    runs in it (docs/design.md §4.7: a step's time is shared by the sequences
    in it). With one slot no runs overlap, and this is ``Coverage`` of
    ``mine``; with k slots, a job beside three others has a quarter of the
    device, not all of it."""

    __slots__ = ("_before", "_rates", "_starts")

    def __init__(self, mine: Iterable[Interval], others: Iterable[Interval]) -> None:
        edges: list[tuple[float, int, int]] = []  # (time, +-1 mine, +-1 all)
        for a, b in mine:
            edges += [(a, 1, 1), (b, -1, -1)]
        for a, b in others:
            edges += [(a, 0, 1), (b, 0, -1)]
        edges.sort()
        self._starts: list[float] = []
        self._rates: list[float] = []
        self._before = [0.0]
        n_mine = n_all = 0
        for i, (t, d_mine, d_all) in enumerate(edges):
            n_mine += d_mine
            n_all += d_all
            end = edges[i + 1][0] if i + 1 < len(edges) else t
            if end > t:
                rate = n_mine / n_all if n_all > 0 else 0.0
                self._starts.append(t)
                self._rates.append(rate)
                self._before.append(self._before[-1] + rate * (end - t))
        self._starts.append(edges[-1][0] if edges else 0.0)

    def _cumulative(self, t: float) -> float:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return 0.0
        if i >= len(self._rates):
            return self._before[-1]
        return self._before[i] + self._rates[i] * (t - self._starts[i])

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, self._cumulative(end) - self._cumulative(start))


def runs(job: JobRecord, horizon: float) -> list[Interval]:
    """When ``job`` held the device (its swaps included), clipped to the horizon."""
    out = []
    for run in job.runs:
        end = min(run.end if run.end is not None else horizon, horizon)
        if end > run.start:
            out.append((run.start, end))
    return out


def presence(job: JobRecord, horizon: float) -> Interval:
    """When the job was queued or running."""
    return (job.submitted, min(job.ended if job.ended is not None else horizon, horizon))
