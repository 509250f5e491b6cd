"""All the simulator's metrics, from the records alone, whichever policy ran.

One function, :func:`compute_metrics` (docs/design.md §8). Every
definition is here or in the module it names, with its reason:

- chat TTFT: first token - submit. A chat with no first token by the end
  counts with its wait so far (a lower bound), so a policy cannot look better
  by never answering. ``wait`` is TTFT minus the chat's own uncontended TTFT
  (its prefill + one token interval), ``ratio`` TTFT over it, and
  ``ratio_boundary`` TTFT over it plus one more token interval: the wait for
  the running job's next token boundary that docs/design.md §4 allows.
- busy time: the device holds a job (a swap it caused included), clipped to
  the horizon. Utilisation = busy / horizon.
- offered load: the device seconds the jobs submitted before the horizon
  would take uninterrupted, per class, over the horizon (a fraction of the
  device's capacity), set beside the load the workload states.
- wasted: device time whose work was thrown away or redone
  (``records.run_waste``): whole runs of restarting jobs, re-evaluation of
  prompt + partial output and snapshot restores of resuming ones, prompt
  evaluations cut before their first token; as a share of busy time.
- swaps: count, seconds, share of busy time, per hour, and against the
  workload's ``min_swaps`` when it knows it.
- fairness (``tierlm.sim.fairness_metrics``): each fair-pool producer's
  service against its max-min fair share given when it had work.
- budget (``tierlm.sim.budget_metrics``): each budgeted class's share of busy
  time in every 300 s window, and in the windows contended by work the policy
  could have run.
- waits: per class (and per producer), from submit to the job's first dispatch.
- arrival waits: per producer, from each moment it arrives (a job submitted
  while none of its jobs is queued or running) to the first dispatch of any
  of its jobs: how long a newcomer waits for its first turn, whatever its own
  backlog (a burst's eighth job waits behind its own seven under any policy).
- deadlines: lateness = max(0, end - deadline); a job not done by the end
  counts with horizon - deadline (a lower bound). Beside it, the bound
  (``tierlm.sim.lateness_bound``): the lateness a schedule that never makes
  a chat wait for a swap cannot avoid, even knowing every chat in advance.
- excursions (``tierlm.sim.excursions``): swaps away from the person's
  model with the chat page open (bets on their reading gap), and how many a
  chat met (lost).
- percentiles interpolate linearly between order statistics.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tierlm.sim.budget_metrics import budget
from tierlm.sim.excursions import excursions
from tierlm.sim.fairness_metrics import fairness
from tierlm.sim.intervals import Interval, merge, presence, runs
from tierlm.sim.lateness_bound import lateness_bounds
from tierlm.sim.records import CHAT_CLASS, PREEMPTED, JobRecord, SimRecords
from tierlm.sim.stats import jain_index, percentile

__all__ = [
    "CHAT_CLASS",
    "compute_metrics",
    "jain_index",
    "percentile",
]


def compute_metrics(rec: SimRecords) -> dict[str, Any]:
    """Every metric of one simulated run (see the module docstring)."""
    horizon = rec.horizon
    runs_by_job = {job.id: runs(job, horizon) for job in rec.jobs}
    busy = sum(b - a for intervals in runs_by_job.values() for a, b in intervals)
    return {
        "jobs": _jobs(rec),
        "chat": _chat(rec),
        "busy_seconds": busy,
        "utilisation": busy / horizon if horizon > 0 else 0.0,
        "offered_load": _offered(rec),
        "waste": _waste(rec, busy),
        "swaps": _swaps(rec, busy),
        "horizon": horizon,
        "service_by_producer": _service(rec, runs_by_job),
        "service_by_class": _service(rec, runs_by_job, by_class=True),
        "fairness": fairness(rec, runs_by_job),
        "budget": budget(rec, runs_by_job),
        "waits": _waits(rec),
        "waits_by_producer": _waits(rec, by_producer=True),
        "arrival_waits": _arrival_waits(rec),
        "deadlines": _deadlines(rec),
        "excursions": excursions(rec),
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
    boundary_ratios: list[float] = []
    unanswered = met_swap = 0
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
        boundary_ratios.append(ttft / (ideal + rec.token_interval))
        met_swap += any(run.swap_start is not None for run in job.runs)
    return {
        "count": len(ttfts),
        "unanswered": unanswered,
        # Chats whose dispatch waited for a swap (the person back on their
        # model after work on another; docs/design.md §4.8).
        "met_swap": met_swap,
        "ttft_p50": percentile(ttfts, 50),
        "ttft_p95": percentile(ttfts, 95),
        "ttft_p99": percentile(ttfts, 99),
        "ttft_max": max(ttfts) if ttfts else None,
        "wait_p50": percentile(waits, 50),
        "wait_p99": percentile(waits, 99),
        "wait_max": max(waits) if waits else None,
        "ratio_p99": percentile(ratios, 99),
        "ratio_boundary_p99": percentile(boundary_ratios, 99),
        "ttfts": ttfts,
        "waits": waits,
    }


def _offered(rec: SimRecords) -> dict[str, Any]:
    by_class: dict[str, float] = defaultdict(float)
    for job in rec.jobs:
        if job.submitted < rec.horizon:
            by_class[job.class_name] += job.ideal_seconds
    offered = {name: seconds / rec.horizon for name, seconds in sorted(by_class.items())}
    return {
        "by_class": offered,
        "total": sum(offered.values()),
        "stated": dict(rec.hints.get("stated_load", {})),
    }


def _waste(rec: SimRecords, busy: float) -> dict[str, Any]:
    wasted = sum(job.wasted_seconds for job in rec.jobs)
    restarted = sum(job.wasted_seconds for job in rec.jobs if job.restarts)
    resumed = [run for job in rec.jobs if not job.restarts for run in job.runs]
    return {
        "wasted_seconds": wasted,
        "wasted_share": wasted / busy if busy > 0 else 0.0,
        "restarted_seconds": restarted,
        "resume_seconds": sum(run.resume_seconds for run in resumed),
        "cut_prompt_seconds": sum(run.cut_seconds for run in resumed if run.how == PREEMPTED),
        "reevaluations": sum(run.reevaluations for run in resumed),
        "restores": sum(run.restores for run in resumed),
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
    for start, end in rec.returns:  # swaps back with no job (§4.8 (excursions))
        if start < rec.horizon:
            count += 1
            seconds += min(end, rec.horizon) - start
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


def _service(
    rec: SimRecords, runs_by_job: dict[int, list[Interval]], *, by_class: bool = False
) -> dict[str, float]:
    service: dict[str, float] = defaultdict(float)
    for job in rec.jobs:
        key = job.class_name if by_class else job.producer
        service[key] += sum(b - a for a, b in runs_by_job[job.id])
    return dict(sorted(service.items()))


def _waits(rec: SimRecords, *, by_producer: bool = False) -> dict[str, Any]:
    """From submit to first dispatch, per class (or producer); a job never
    started by the end counts with its wait so far (a lower bound)."""
    waits: dict[str, list[float]] = defaultdict(list)
    for job in _submitted(rec.jobs, rec.horizon):
        key = job.producer if by_producer else job.class_name
        if job.runs and job.runs[0].start <= rec.horizon:
            waits[key].append(job.runs[0].start - job.submitted)
        elif job.outcome != "cancelled":
            waits[key].append(rec.horizon - job.submitted)
    return {
        name: {"count": len(w), "p50": percentile(w, 50), "max": max(w)}
        for name, w in sorted(waits.items())
    }


def _arrival_waits(rec: SimRecords) -> dict[str, Any]:
    """Per producer: from each arrival to its first dispatch after it (module
    docstring); an arrival not served by the end counts with its wait so far."""
    by_producer: dict[str, list[JobRecord]] = defaultdict(list)
    for job in _submitted(rec.jobs, rec.horizon):
        by_producer[job.producer].append(job)
    out: dict[str, Any] = {}
    for producer, jobs in sorted(by_producer.items()):
        starts = sorted(run.start for job in jobs for run in job.runs if run.start <= rec.horizon)
        waits = []
        for arrived, left in merge(presence(job, rec.horizon) for job in jobs):
            i = bisect.bisect_left(starts, arrived)
            served = i < len(starts) and starts[i] <= left
            waits.append((starts[i] if served else rec.horizon) - arrived)
        if waits:
            out[producer] = {"count": len(waits), "p50": percentile(waits, 50), "max": max(waits)}
    return out


def _submitted(jobs: Sequence[JobRecord], horizon: float) -> list[JobRecord]:
    return [job for job in jobs if job.submitted < horizon]


def _deadlines(rec: SimRecords) -> dict[str, Any]:
    lateness = [x for job in rec.jobs if (x := job.lateness(rec.horizon)) is not None]
    bounds = lateness_bounds(rec)
    return {
        "count": len(lateness),
        "late": sum(1 for x in lateness if x > 0),
        "lateness_p95": percentile(lateness, 95),
        "lateness_max": max(lateness) if lateness else None,
        # What no schedule that keeps people from waiting for swaps can beat.
        "bound_p95": percentile(bounds, 95),
        "bound_max": max(bounds) if bounds else None,
    }
