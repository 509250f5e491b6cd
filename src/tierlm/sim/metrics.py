"""All the simulator's metrics, from the records alone, whichever policy ran.

One function, :func:`compute_metrics` (docs/design.md §8). Every
definition is here, with its reason:

- chat TTFT: first token - submit. A chat with no first token by the end
  counts with its wait so far (a lower bound), so a policy cannot look better
  by never answering. ``wait`` is TTFT minus the chat's own uncontended TTFT
  (its prefill + one token interval), ``ratio`` TTFT over it.
- busy time: the device holds a job (a swap it caused included), clipped to
  the horizon. Utilisation = busy / horizon.
- wasted: device time whose work a preemption threw away (``account_run``),
  as a share of busy time.
- swaps: count, seconds, share of busy time, per hour, and against the
  workload's ``min_swaps`` when it knows it.
- fairness (VTC, arXiv:2501.14312): the run is cut into 60 s windows; in each,
  the fair-pool producers backlogged (a job queued or running) throughout it
  are compared. ``max_diff_60s``: the largest service difference between two
  of them in one window. Consecutive windows with the same backlogged set
  form an epoch; ``jain`` is Jain's index of their service over each epoch,
  weighted by epoch length (``jain_min``: the worst epoch). Service counts the
  swaps a producer's jobs caused, as docs/design.md §4 charges them.
- budget: each budgeted class's share of busy time in every 300 s window
  ending on a multiple of 30 s; "contended" windows are those where another
  class had a job queued or running throughout.
- deadlines: lateness = max(0, end - deadline); a job not done by the end
  counts with horizon - deadline (a lower bound).
- percentiles interpolate linearly between order statistics.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from tierlm.sim.records import JobRecord, SimRecords

__all__ = [
    "BUDGET_STEP",
    "BUDGET_WINDOW",
    "CHAT_CLASS",
    "FAIR_WINDOW",
    "compute_metrics",
    "jain_index",
    "percentile",
]

CHAT_CLASS = "chat"
FAIR_WINDOW = 60.0  # max service difference over 60 s windows (VTC's measure)
BUDGET_WINDOW = 300.0  # docs/design.md §3: "per rolling 300 s"
BUDGET_STEP = 30.0
_EPS = 1e-9

Interval = tuple[float, float]


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100), linear between order statistics; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 is equal shares."""
    if not values:
        return None
    square_sum = sum(v * v for v in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


class _Coverage:
    """Time covered by disjoint intervals (one device: runs never overlap), with
    O(log n) queries: how much of [start, end] is covered, and whether all is."""

    __slots__ = ("_before", "_ends", "_starts")

    def __init__(self, intervals: Iterable[Interval]) -> None:
        merged = _merge(intervals)
        self._starts = [a for a, _ in merged]
        self._ends = [b for _, b in merged]
        self._before = [0.0]
        for a, b in merged:
            self._before.append(self._before[-1] + (b - a))

    def _cumulative(self, t: float) -> float:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return 0.0
        return self._before[i] + min(t, self._ends[i]) - self._starts[i]

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, self._cumulative(end) - self._cumulative(start))

    def covers(self, start: float, end: float) -> bool:
        i = bisect.bisect_right(self._starts, start + _EPS) - 1
        return i >= 0 and self._ends[i] >= end - _EPS


def _merge(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + _EPS:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _runs(job: JobRecord, horizon: float) -> list[Interval]:
    out = []
    for run in job.runs:
        end = min(run.end if run.end is not None else horizon, horizon)
        if end > run.start:
            out.append((run.start, end))
    return out


def _presence(job: JobRecord, horizon: float) -> Interval:
    """When the job was queued or running."""
    return (job.submitted, min(job.ended if job.ended is not None else horizon, horizon))


def compute_metrics(rec: SimRecords) -> dict[str, Any]:
    """Every metric of one simulated run (see the module docstring)."""
    horizon = rec.horizon
    runs_by_job = {job.id: _runs(job, horizon) for job in rec.jobs}
    busy = sum(b - a for runs in runs_by_job.values() for a, b in runs)
    return {
        "jobs": _jobs(rec),
        "chat": _chat(rec),
        "busy_seconds": busy,
        "utilisation": busy / horizon if horizon > 0 else 0.0,
        "waste": _waste(rec, busy),
        "swaps": _swaps(rec, busy),
        "service_by_producer": _service(rec, runs_by_job),
        "fairness": _fairness(rec, runs_by_job),
        "budget": _budget(rec, runs_by_job),
        "deadlines": _deadlines(rec),
    }


def _jobs(rec: SimRecords) -> dict[str, Any]:
    outcomes: dict[str, int] = defaultdict(int)
    completed_by_class: dict[str, int] = defaultdict(int)
    for job in rec.jobs:
        outcomes[job.outcome] += 1
        if job.outcome == "completed":
            completed_by_class[job.class_name] += 1
    return {
        "submitted": len(rec.jobs),
        "completed": outcomes["completed"],
        "unfinished": outcomes["unfinished"],
        "cancelled": outcomes["cancelled"],
        "failed": outcomes["failed"],
        "completed_by_class": dict(sorted(completed_by_class.items())),
    }


def _chat(rec: SimRecords) -> dict[str, Any]:
    ttfts: list[float] = []
    waits: list[float] = []
    ratios: list[float] = []
    unanswered = 0
    for job in rec.jobs:
        if job.class_name != CHAT_CLASS or job.submitted >= rec.horizon:
            continue
        if job.first_token is not None:
            ttft = job.first_token - job.submitted
        else:
            unanswered += 1
            ttft = rec.horizon - job.submitted
        ideal = job.prompt_tokens * rec.prefill_per_token + rec.token_interval
        ttfts.append(ttft)
        waits.append(max(0.0, ttft - ideal))
        ratios.append(ttft / ideal)
    return {
        "count": len(ttfts),
        "unanswered": unanswered,
        "ttft_p50": percentile(ttfts, 50),
        "ttft_p95": percentile(ttfts, 95),
        "ttft_p99": percentile(ttfts, 99),
        "ttft_max": max(ttfts) if ttfts else None,
        "wait_p50": percentile(waits, 50),
        "wait_p99": percentile(waits, 99),
        "wait_max": max(waits) if waits else None,
        "ratio_p99": percentile(ratios, 99),
        "ttfts": ttfts,
        "waits": waits,
    }


def _waste(rec: SimRecords, busy: float) -> dict[str, Any]:
    wasted = sum(job.wasted_seconds for job in rec.jobs)
    return {
        "wasted_seconds": wasted,
        "wasted_share": wasted / busy if busy > 0 else 0.0,
        "tokens_kept": sum(job.tokens_kept for job in rec.jobs),
        "tokens_discarded": sum(job.tokens_discarded for job in rec.jobs),
        "preemptions": sum(job.preemptions for job in rec.jobs),
    }


def _swaps(rec: SimRecords, busy: float) -> dict[str, Any]:
    count = 0
    seconds = 0.0
    for job in rec.jobs:
        for run in job.runs:
            if run.swap_start is None or run.swap_start >= rec.horizon:
                continue
            count += 1
            end = run.swap_end if run.swap_end is not None else rec.horizon
            seconds += min(end, rec.horizon) - run.swap_start
    minimum = rec.hints.get("min_swaps")
    return {
        "count": count,
        "seconds": seconds,
        "share": seconds / busy if busy > 0 else 0.0,
        "per_hour": count * 3600.0 / rec.horizon,
        "min_possible": minimum,
        "min_work_conserving": rec.hints.get("min_swaps_work_conserving"),
        "ratio_to_min": count / minimum if minimum else None,
    }


def _service(rec: SimRecords, runs_by_job: dict[int, list[Interval]]) -> dict[str, float]:
    service: dict[str, float] = defaultdict(float)
    for job in rec.jobs:
        service[job.producer] += sum(b - a for a, b in runs_by_job[job.id])
    return dict(sorted(service.items()))


def _fairness(rec: SimRecords, runs_by_job: dict[int, list[Interval]]) -> dict[str, Any]:
    fair = set(rec.fair_classes)
    presence: dict[str, list[Interval]] = defaultdict(list)
    runs: dict[str, list[Interval]] = defaultdict(list)
    for job in rec.jobs:
        if job.class_name in fair:
            presence[job.producer].append(_presence(job, rec.horizon))
            runs[job.producer].extend(runs_by_job[job.id])
    backlog = {producer: _Coverage(intervals) for producer, intervals in presence.items()}
    service_of = {producer: _Coverage(runs[producer]) for producer in presence}
    windows = int(rec.horizon // FAIR_WINDOW + _EPS)
    max_diff: float | None = None
    epochs: list[tuple[tuple[str, ...], float, dict[str, float]]] = []
    for k in range(windows):
        start, end = k * FAIR_WINDOW, (k + 1) * FAIR_WINDOW
        members = tuple(sorted(p for p, b in backlog.items() if b.covers(start, end)))
        if len(members) < 2:
            continue
        service = {p: service_of[p].overlap(start, end) for p in members}
        diff = max(service.values()) - min(service.values())
        max_diff = diff if max_diff is None else max(max_diff, diff)
        if epochs and epochs[-1][0] == members and math.isclose(epochs[-1][1], start):
            _members, _start, total = epochs[-1]
            for p, s in service.items():
                total[p] += s
            epochs[-1] = (members, end, total)
        else:
            epochs.append((members, end, dict(service)))
    weighted = 0.0
    length = 0.0
    worst: float | None = None
    sizes = []
    for members, _end, total in epochs:
        jain = jain_index([total[p] for p in members])
        assert jain is not None
        span = sum(total.values())
        weighted += jain * span
        length += span
        worst = jain if worst is None else min(worst, jain)
        sizes.append(len(members))
    return {
        "producers": sorted(backlog),
        "jain": weighted / length if length > 0 else None,
        "jain_min": worst,
        "max_diff_60s": max_diff,
        "epochs": len(epochs),
        "epoch_sizes": sizes,
    }


def _budget(rec: SimRecords, runs_by_job: dict[int, list[Interval]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cap in rec.budget_caps.items():
        mine: list[Interval] = []
        others: list[Interval] = []
        other_presence: list[Interval] = []
        longest = 0.0
        for job in rec.jobs:
            if job.class_name == name:
                mine.extend(runs_by_job[job.id])
                longest = max(longest, job.ideal_seconds)
            else:
                others.extend(runs_by_job[job.id])
                other_presence.append(_presence(job, rec.horizon))
        used_by = _Coverage(mine)
        busy = _Coverage([*mine, *others])
        contention = _Coverage(other_presence)
        shares: list[float] = []
        contended: list[float] = []
        end = BUDGET_WINDOW
        while end <= rec.horizon + _EPS:
            start = end - BUDGET_WINDOW
            total = busy.overlap(start, end)
            if total > 0:
                share = used_by.overlap(start, end) / total
                shares.append(share)
                if contention.covers(start, end):
                    contended.append(share)
            end += BUDGET_STEP
        out[name] = {
            "cap": cap,
            "longest_job_seconds": longest,
            "windows": len(shares),
            "max_share": max(shares) if shares else None,
            "contended_windows": len(contended),
            "max_share_contended": max(contended) if contended else None,
            "mean_share_contended": sum(contended) / len(contended) if contended else None,
        }
    return out


def _deadlines(rec: SimRecords) -> dict[str, Any]:
    lateness: list[float] = []
    for job in rec.jobs:
        if job.deadline is None or job.outcome == "cancelled":
            continue
        if job.outcome == "completed" and job.ended is not None and job.ended <= rec.horizon:
            lateness.append(max(0.0, job.ended - job.deadline))
        elif job.deadline < rec.horizon:
            lateness.append(rec.horizon - job.deadline)
    return {
        "count": len(lateness),
        "late": sum(1 for x in lateness if x > 0),
        "lateness_p95": percentile(lateness, 95),
        "lateness_max": max(lateness) if lateness else None,
    }
