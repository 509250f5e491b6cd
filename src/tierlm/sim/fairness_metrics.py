"""Fairness among the fair pool's producers (docs/design.md §8.4).

- A producer's service is device time, each moment shared equally by the
  sequences running in it, as the policy charges a batch (docs/design.md
  §4.7): on one slot its jobs' run time (swaps they caused included, as
  docs/design.md §4 charges them), on k slots a job beside three others
  has a quarter of the device.
- Each producer's service against its max-min fair share given when it had
  work (``tierlm.sim.fair_share``): ``ratio`` = service / fair share over the
  run, ``min_ratio`` the worst producer's, ``jain`` Jain's index of the ratios
  (1: everyone got the same fraction of what they were owed),
  ``shortfall_60s`` the most any producer got below its fair share in one
  60 s window.
- ``pool_share``: the pool's device time over the run (a pool starved by
  higher tiers is fair within itself, and this says so).
- ``max_diff_60s`` (VTC, arXiv:2501.14312): the largest difference in
  service between two producers on a common model, both backlogged (a job
  queued or running) throughout one 60 s window, counted up to what the one
  ahead got while a job of the one behind waited (on one slot, all of it).
- ``max_diff_cross_model``: the same between producers on different models,
  over ``CROSS_WINDOW``: a model is held up to max_affinity_wait against
  another's work (docs/design.md §4.8), so within 60 s a producer on the other
  model waits for its swap, not for its turn.
- ``min_share_300s`` per producer: its smallest share of the device in a 300 s
  window (ends every 30 s) throughout which it was backlogged: a starvation
  detector, on the window of docs/design.md §4's pool floor.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from tierlm.sim.fair_share import FairShare
from tierlm.sim.intervals import EPS, Coverage, Interval, complement, intersect, merge, presence
from tierlm.sim.records import SimRecords
from tierlm.sim.stats import jain_index

__all__ = ["FAIR_WINDOW", "FLOOR_STEP", "FLOOR_WINDOW", "fairness"]

FAIR_WINDOW = 60.0  # VTC's window for the service difference
# Across models: a hold of max_affinity_wait (120 s) + a swap + a job is
# under 12 % of 1 200 s (docs/design.md §4.8).
CROSS_WINDOW = 1200.0
FLOOR_WINDOW = 300.0  # docs/design.md §4.5: "in a 300 s window"
FLOOR_STEP = 30.0
# A producer owed less than this (s) over the run is left out of the ratios:
# a ratio over a few seconds measures one job's timing, not a share.
MIN_OWED = 1.0
# Past this many producers the per-window figures are not computed (each
# costs producers x windows queries); the whole-run ratios still are.
MAX_WINDOWED_PRODUCERS = 1000


def fairness(rec: SimRecords, runs_by_job: dict[int, list[Interval]]) -> dict[str, Any]:
    pool = set(rec.fair_classes)
    horizon = rec.horizon
    present: dict[str, list[Interval]] = defaultdict(list)
    served: dict[str, list[Interval]] = defaultdict(list)
    class_of: dict[str, str] = {}
    models: dict[str, set[str]] = defaultdict(set)
    own: dict[str, list[tuple[Interval, list[Interval]]]] = defaultdict(list)
    every_run: list[Interval] = []
    for job in rec.jobs:
        every_run.extend(runs_by_job[job.id])
        if job.class_name not in pool or job.submitted >= horizon:
            continue
        class_of.setdefault(job.producer, job.class_name)
        models[job.producer].add(job.model_id)
        present[job.producer].append(presence(job, horizon))
        own[job.producer].append((presence(job, horizon), runs_by_job[job.id]))
        served[job.producer].extend(runs_by_job[job.id])
    if not present:
        return _empty()
    backlog = {p: Coverage(iv) for p, iv in present.items()}
    waiting = {p: _waiting(own[p]) for p in present}
    # Device time, each moment shared by the sequences running in it.
    service = _shared_service(served, every_run)
    # The pool's capacity: the device running pool jobs, or idle while one waits.
    pool_present = merge(iv for c in backlog.values() for iv in c.intervals)
    idle = complement(merge(every_run), 0.0, horizon)
    pool_runs = [iv for runs in served.values() for iv in runs]
    capacity = merge([*pool_runs, *intersect(idle, pool_present)])
    share = FairShare({p: c.intervals for p, c in backlog.items()}, class_of, capacity)

    windowed = len(present) <= MAX_WINDOWED_PRODUCERS
    producers: dict[str, dict[str, float | None]] = {}
    ratios: dict[str, float] = {}
    for p in sorted(present):
        owed = share.owed(p, horizon)
        got = service[p].at(horizon)
        ratio = got / owed if owed >= MIN_OWED else None
        if ratio is not None:
            ratios[p] = ratio
        producers[p] = {
            "service": got,
            "fair_share": owed,
            "ratio": ratio,
            "device_share": got / horizon,
            "min_share_300s": _min_share(backlog[p], service[p], horizon) if windowed else None,
        }
    worst = min(ratios, key=lambda p: (ratios[p], p)) if ratios else None
    return {
        "producers": producers,
        "pool_share": sum(c.at(horizon) for c in service.values()) / horizon,
        "jain": jain_index(list(ratios.values())),
        "min_ratio": ratios[worst] if worst is not None else None,
        "worst_producer": worst,
        "shortfall_60s": _shortfall(share, service, horizon) if windowed else None,
        "max_diff_60s": (
            _max_diff(backlog, service, waiting, horizon, models, cross=False) if windowed else None
        ),
        "max_diff_cross_model": (
            _max_diff(backlog, service, waiting, horizon, models, cross=True) if windowed else None
        ),
    }


def _empty() -> dict[str, Any]:
    return {
        "producers": {},
        "pool_share": 0.0,
        "jain": None,
        "min_ratio": None,
        "worst_producer": None,
        "shortfall_60s": None,
        "max_diff_60s": None,
        "max_diff_cross_model": None,
    }


def _windows(horizon: float, length: float, step: float) -> list[tuple[float, float]]:
    out = []
    end = length
    while end <= horizon + EPS:
        out.append((end - length, end))
        end += step
    return out


def _shortfall(share: FairShare, service: Mapping[str, _Served], horizon: float) -> float | None:
    worst: float | None = None
    for start, end in _windows(horizon, FAIR_WINDOW, FAIR_WINDOW):
        for p, served in service.items():
            owed = share.fair(p, start, end)
            if owed <= EPS:
                continue
            gap = max(0.0, owed - served.overlap(start, end))
            worst = gap if worst is None else max(worst, gap)
    return worst


def _max_diff(
    backlog: Mapping[str, Coverage],
    service: Mapping[str, _Served],
    waiting: Mapping[str, list[Interval]],
    horizon: float,
    models: Mapping[str, set[str]],
    *,
    cross: bool,
) -> float | None:
    """The largest service difference between two producers both backlogged
    throughout one window: on a common model in 60 s windows (VTC's pairs:
    the loaded model serves them alike), or, with ``cross``, on two models in
    ``CROSS_WINDOW`` windows (docs/design.md §4.8: a producer on another model
    waits for its swap, bounded by max_affinity_wait, not for its turn).

    The one behind is wronged only by what the other got while a job of its
    own waited: the difference counts up to that. On one slot the other runs
    only while it waits, so this is the whole difference; on k slots a
    producer whose every job holds a slot is served all it asks."""
    worst = None
    length = CROSS_WINDOW if cross else FAIR_WINDOW
    for start, end in _windows(horizon, length, length):
        got = {
            p: service[p].overlap(start, end) for p, b in backlog.items() if b.covers(start, end)
        }
        ahead = sorted(got, key=lambda p: (-got[p], p))
        for q, behind in got.items():
            waited: list[Interval] | None = None
            for p in ahead:
                bound = got[p] - behind
                if bound <= 0.0 or (worst is not None and bound <= worst):
                    break
                if p == q or bool(models[p] & models[q]) == cross:
                    continue
                if waited is None:
                    waited = _clip(waiting[q], start, end)
                diff = min(bound, sum(service[p].overlap(a, b) for a, b in waited))
                worst = diff if worst is None else max(worst, diff)
        if worst is None and any(
            bool(models[p] & models[q]) != cross for p in got for q in got if p < q
        ):
            worst = 0.0  # two to compare, and none behind
    return worst


def _clip(intervals: list[Interval], start: float, end: float) -> list[Interval]:
    """The parts of merged ``intervals`` inside [start, end]."""
    i = max(0, bisect.bisect_right(intervals, (start, start)) - 1)
    out: list[Interval] = []
    while i < len(intervals) and intervals[i][0] < end:
        a, b = intervals[i]
        if b > start:
            out.append((max(a, start), min(b, end)))
        i += 1
    return out


def _waiting(jobs: Iterable[tuple[Interval, list[Interval]]]) -> list[Interval]:
    """When a producer had a job queued and not running (merged)."""
    out: list[Interval] = []
    for (start, end), runs in jobs:
        out.extend(complement(merge(runs), start, end))
    return merge(out)


class _Served:
    """A producer's device time: ``count`` of its runs over ``all`` runs at
    each moment (docs/design.md §4.7: a step is shared by its sequences), from
    the global integral of 1/n (``shared``) between its own run edges."""

    __slots__ = ("_counts", "_edges", "_prefix", "_shared")

    def __init__(self, runs: Iterable[Interval], shared: _PerSequence) -> None:
        points = sorted([(a, 1) for a, _ in runs] + [(b, -1) for _, b in runs])
        self._shared = shared
        self._edges: list[float] = []
        self._counts: list[int] = []
        self._prefix: list[float] = []
        count = 0
        for t, delta in points:
            if self._edges and self._edges[-1] == t:
                count += delta
                self._counts[-1] = count
                continue
            before = self._at_edge(t)
            count += delta
            self._edges.append(t)
            self._counts.append(count)
            self._prefix.append(before)

    def _at_edge(self, t: float) -> float:
        if not self._edges:
            return 0.0
        last = self._edges[-1]
        return self._prefix[-1] + self._counts[-1] * (self._shared.at(t) - self._shared.at(last))

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self._edges, t) - 1
        if i < 0:
            return 0.0
        edge = self._edges[i]
        return self._prefix[i] + self._counts[i] * (self._shared.at(t) - self._shared.at(edge))

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, self.at(end) - self.at(start))


class _PerSequence:
    """The integral of 1/n over time, n the sequences running (0 while none)."""

    __slots__ = ("_rates", "_times", "_values")

    def __init__(self, every_run: Iterable[Interval]) -> None:
        points = sorted([(a, 1) for a, _ in every_run] + [(b, -1) for _, b in every_run])
        self._times: list[float] = [0.0]
        self._values: list[float] = [0.0]
        self._rates: list[float] = [0.0]
        n = 0
        for t, delta in points:
            n += delta
            rate = 1.0 / n if n > 0 else 0.0
            value = self.at(t)
            if t == self._times[-1]:
                self._values[-1], self._rates[-1] = value, rate
            else:
                self._times.append(t)
                self._values.append(value)
                self._rates.append(rate)

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self._times, t) - 1
        if i < 0:
            return 0.0
        return self._values[i] + self._rates[i] * (t - self._times[i])


def _shared_service(
    served: Mapping[str, list[Interval]], every_run: list[Interval]
) -> dict[str, _Served]:
    shared = _PerSequence(every_run)
    return {p: _Served(runs, shared) for p, runs in served.items()}


def _min_share(backlog: Coverage, service: _Served, horizon: float) -> float | None:
    shares = [
        service.overlap(start, end) / FLOOR_WINDOW
        for start, end in _windows(horizon, FLOOR_WINDOW, FLOOR_STEP)
        if backlog.covers(start, end)
    ]
    return min(shares) if shares else None
