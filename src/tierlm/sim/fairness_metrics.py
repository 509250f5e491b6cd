"""Fairness among the fair pool's producers (docs/design.md §8.4).

- Each producer's service (device time of its jobs, swaps they caused
  included, as docs/design.md §4 charges them) against its max-min fair share
  given when it had work (``tierlm.sim.fair_share``): ``ratio`` = service /
  fair share over the run, ``min_ratio`` the worst producer's, ``jain``
  Jain's index of the ratios (1: everyone got the same fraction of what they
  were owed), ``shortfall_60s`` the most any producer got below its fair
  share in one 60 s window.
- ``pool_share``: the pool's device time over the run (a pool starved by
  higher tiers is fair within itself, and this says so).
- ``max_diff_60s`` (VTC, arXiv:2501.14312): the largest difference in
  service between two producers both backlogged (a job queued or running)
  throughout one 60 s window.
- ``min_share_300s`` per producer: its smallest share of the device in a 300 s
  window (ends every 30 s) throughout which it was backlogged: a starvation
  detector, on the window of docs/design.md §4's pool floor.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tierlm.sim.fair_share import FairShare
from tierlm.sim.intervals import EPS, Coverage, Interval, complement, intersect, merge, presence
from tierlm.sim.records import SimRecords
from tierlm.sim.stats import jain_index

__all__ = ["FAIR_WINDOW", "FLOOR_STEP", "FLOOR_WINDOW", "fairness"]

FAIR_WINDOW = 60.0  # VTC's window for the service difference
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
    every_run: list[Interval] = []
    for job in rec.jobs:
        every_run.extend(runs_by_job[job.id])
        if job.class_name not in pool or job.submitted >= horizon:
            continue
        class_of.setdefault(job.producer, job.class_name)
        present[job.producer].append(presence(job, horizon))
        served[job.producer].extend(runs_by_job[job.id])
    if not present:
        return _empty()
    backlog = {p: Coverage(iv) for p, iv in present.items()}
    service = {p: Coverage(served[p]) for p in present}
    # The pool's capacity: the device running pool jobs, or idle while one waits.
    pool_present = merge(iv for c in backlog.values() for iv in c.intervals)
    idle = complement(merge(every_run), 0.0, horizon)
    pool_runs = [iv for c in service.values() for iv in c.intervals]
    capacity = merge([*pool_runs, *intersect(idle, pool_present)])
    share = FairShare({p: c.intervals for p, c in backlog.items()}, class_of, capacity)

    windowed = len(present) <= MAX_WINDOWED_PRODUCERS
    producers: dict[str, dict[str, float | None]] = {}
    ratios: dict[str, float] = {}
    for p in sorted(present):
        owed = share.owed(p, horizon)
        got = service[p].total
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
        "pool_share": sum(c.total for c in service.values()) / horizon,
        "jain": jain_index(list(ratios.values())),
        "min_ratio": ratios[worst] if worst is not None else None,
        "worst_producer": worst,
        "shortfall_60s": _shortfall(share, service, horizon) if windowed else None,
        "max_diff_60s": _max_diff(backlog, service, horizon) if windowed else None,
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
    }


def _windows(horizon: float, length: float, step: float) -> list[tuple[float, float]]:
    out = []
    end = length
    while end <= horizon + EPS:
        out.append((end - length, end))
        end += step
    return out


def _shortfall(share: FairShare, service: dict[str, Coverage], horizon: float) -> float | None:
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
    backlog: dict[str, Coverage], service: dict[str, Coverage], horizon: float
) -> float | None:
    worst: float | None = None
    for start, end in _windows(horizon, FAIR_WINDOW, FAIR_WINDOW):
        got = [service[p].overlap(start, end) for p, b in backlog.items() if b.covers(start, end)]
        if len(got) >= 2:
            diff = max(got) - min(got)
            worst = diff if worst is None else max(worst, diff)
    return worst


def _min_share(backlog: Coverage, service: Coverage, horizon: float) -> float | None:
    shares = [
        service.overlap(start, end) / FLOOR_WINDOW
        for start, end in _windows(horizon, FLOOR_WINDOW, FLOOR_STEP)
        if backlog.covers(start, end)
    ]
    return min(shares) if shares else None
