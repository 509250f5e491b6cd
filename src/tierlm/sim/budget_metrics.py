"""Budgeted classes' share of busy time (docs/design.md §8.4).

Each budgeted class's share of busy device time in every 300 s window ending
on a multiple of 30 s (docs/design.md §3: "per rolling 300 s"). The cap binds
only while other work is RUNNABLE (docs/design.md §4.3: skipped "AND some
other job is runnable"), so the bound is checked on the windows contended
throughout by work the policy could have run instead:

- a job of another class queued or running on the model the device holds
  (during a swap, the model it is loading), or on any model when none is held;
- or on another model while a swap away is allowed: not within ``chat_grace``
  of the last chat on the held model, and not while the chat surface is open
  after a chat on it (for ``chat_idle`` after that chat, when the policy has
  that limit), docs/design.md §4.8. Work that only a forbidden swap
  could reach does not contend.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tierlm.sim.intervals import (
    EPS,
    Coverage,
    Interval,
    SharedTime,
    intersect,
    merge,
    presence,
    subtract,
)
from tierlm.sim.records import CHAT_CLASS, SimRecords

__all__ = ["BUDGET_STEP", "BUDGET_WINDOW", "budget", "runnable_other_work"]

BUDGET_WINDOW = 300.0  # docs/design.md §3: "per rolling 300 s"
BUDGET_STEP = 30.0


def budget(rec: SimRecords, runs_by_job: dict[int, list[Interval]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    present = {job.class_name for job in rec.jobs}
    for name, cap in rec.budget_caps.items():
        if name not in present:
            continue  # nothing to measure: the workload has none of its jobs
        mine: list[Interval] = []
        others: list[Interval] = []
        longest = 0.0
        for job in rec.jobs:
            if job.class_name == name:
                mine.extend(runs_by_job[job.id])
                longest = max(longest, job.ideal_seconds)
            else:
                others.extend(runs_by_job[job.id])
        # Slot-time, as the budget is counted (docs/design.md §4.7): with k
        # slots an extraction beside three other sequences uses a quarter.
        used_by = SharedTime(mine, others)
        busy = Coverage([*mine, *others])
        contention = Coverage(runnable_other_work(rec, name))
        shares: list[float] = []
        contended: list[float] = []
        end = BUDGET_WINDOW
        while end <= rec.horizon + EPS:
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


def runnable_other_work(rec: SimRecords, class_name: str) -> list[Interval]:
    """When a job of another class than ``class_name`` was queued or running
    and the policy could have run it (module docstring)."""
    horizon = rec.horizon
    anything: list[Interval] = []  # no model held: every model runs without a swap
    on_model: dict[str, list[Interval]] = defaultdict(list)
    for start, end, model in _held_models(rec):
        if model is None:
            anything.append((start, end))
        else:
            on_model[model].append((start, end))
    allowed_away: list[Interval] = []  # a swap away from the held model is allowed
    surface = _chat_surface_open(rec)
    for model, segments in on_model.items():
        allowed_away.extend(subtract(merge(segments), _swap_holds(rec, model, surface)))
    away = merge([*allowed_away, *anything])
    waiting: dict[str, list[Interval]] = defaultdict(list)
    for job in rec.jobs:
        if job.class_name != class_name and job.submitted < horizon:
            waiting[job.model_id].append(presence(job, horizon))
    out: list[Interval] = []
    for model, intervals in waiting.items():
        reachable = merge([*on_model.get(model, []), *away])
        out.extend(intersect(merge(intervals), reachable))
    return merge(out)


def _held_models(rec: SimRecords) -> list[tuple[float, float, str | None]]:
    """(start, end, model) segments over [0, horizon]: the model the device
    holds, or is loading, from each dispatch to the next."""
    starts = sorted((run.start, job.model_id) for job in rec.jobs for run in job.runs)
    segments: list[tuple[float, float, str | None]] = []
    at, model = 0.0, rec.initial_model
    for start, next_model in starts:
        if start >= rec.horizon:
            break
        if start > at:
            segments.append((at, start, model))
        at, model = max(at, start), next_model
    if at < rec.horizon:
        segments.append((at, rec.horizon, model))
    return segments


def _swap_holds(rec: SimRecords, model: str, surface: list[Interval]) -> list[Interval]:
    """When the policy holds the device on ``model`` after a chat on it."""
    ends = sorted(
        job.ended
        for job in rec.jobs
        if job.class_name == CHAT_CLASS and job.model_id == model and job.ended is not None
    )
    if not ends:
        return []
    holds = [(end, end + rec.chat_grace) for end in ends]
    if rec.chat_idle is None:
        holds.extend(intersect(surface, [(ends[0], rec.horizon)]))
    else:
        idle = merge((end, end + rec.chat_idle) for end in ends)
        holds.extend(intersect(surface, idle))
    return merge(holds)


def _chat_surface_open(rec: SimRecords) -> list[Interval]:
    out: list[Interval] = []
    opened: float | None = None
    for time, name in rec.foreground:
        if name == CHAT_CLASS and opened is None:
            opened = time
        elif name != CHAT_CLASS and opened is not None:
            out.append((opened, time))
            opened = None
    if opened is not None:
        out.append((opened, rec.horizon))
    return merge(out)
