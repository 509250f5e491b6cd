"""The lateness a person-first schedule cannot avoid (docs/design.md §8).

A job on a model no chat is using can run only while the device is away from
the person's model, and tierlm promises that no chat waits for background
work: a swap away must be back before the person's next message arrives. So
however clever the scheduler, such a job runs only in the gaps between chats,
less a swap in and a swap back. This module computes, from a run's records,
the least lateness each job with a deadline must then have, for a scheduler
that is better than any real one in every way:

- clairvoyant: it knows when every chat will arrive;
- chats take their uncontended time (``JobRecord.ideal_seconds``), so the
  gaps are as long as they can be;
- the job may be split across gaps with nothing lost (a snapshot kept across
  swaps, restored for free), and nothing else competes for the gaps;
- it loads the job's model as soon as the device is free of chats (before
  the job arrives, if it likes), and after the last chat owes no swap back.

Every real schedule that never makes a chat wait for a swap has, job by job,
at least this lateness, so its ``lateness_max`` and ``lateness_p95`` are at
least the bound's. A policy below it made some chat wait for a swap. Jobs
that share a model with every chat are not held by swaps here: their bound
is their own run alone (``submitted + ideal - deadline``, or 0).

The bound is for the chats as they arrived in the run. A trace's chats
arrive whatever the schedule (``azure-chat``), so there it is one figure per
workload, seed and device, whichever policy ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tierlm.sim.intervals import Interval, merge
from tierlm.sim.records import CHAT_CLASS, JobRecord, SimRecords

__all__ = ["lateness_bounds"]


def lateness_bounds(rec: SimRecords) -> list[float]:
    """Each deadline job's least lateness under any person-first schedule, in
    the order and over the same jobs as ``JobRecord.lateness``."""
    chats = [job for job in rec.jobs if job.class_name == CHAT_CLASS]
    away_from: dict[str, list[Interval]] = {}
    bounds: list[float] = []
    for job in rec.jobs:
        if job.deadline is None or job.lateness(rec.horizon) is None:
            continue  # not counted by the lateness metric either
        if job.model_id not in away_from:
            # The person's chats on other models: the device is theirs then.
            away_from[job.model_id] = merge(
                (chat.submitted, chat.submitted + chat.ideal_seconds)
                for chat in chats
                if chat.model_id != job.model_id
            )
        done = _earliest_end(job, away_from[job.model_id], rec)
        bounds.append(max(0.0, min(done, rec.horizon) - job.deadline))
    return bounds


def _earliest_end(job: JobRecord, held: Sequence[Interval], rec: SimRecords) -> float:
    """When ``job`` could finish at the earliest, running only outside
    ``held`` (merged), its model loaded after every held stretch and the
    person's loaded back before the next."""
    left = job.ideal_seconds
    swap = rec.swap_seconds
    # When the device last had to hold another model: at the start, unless it
    # held the job's own (a clairvoyant scheduler swaps ahead of the job).
    elsewhere = -math.inf if rec.initial_model == job.model_id else 0.0
    for gap_start, gap_end, after_held in _gaps(held, job.submitted):
        if after_held:
            elsewhere = gap_start
        ready = max(job.submitted, gap_start, elsewhere + swap)
        swap_back = 0.0 if gap_end == math.inf else swap
        usable = gap_end - swap_back - ready
        if usable <= 0.0:
            continue
        if usable >= left:
            return ready + left
        left -= usable
    return math.inf  # unreachable: the last gap is unbounded


def _gaps(held: Sequence[Interval], since: float) -> list[tuple[float, float, bool]]:
    """The gaps between ``held`` stretches that end after ``since``, the last
    unbounded: (start, end, whether a held stretch precedes it)."""
    gaps: list[tuple[float, float, bool]] = []
    cursor, after_held = -math.inf, False
    for start, end in held:
        if start > cursor and start > since:
            gaps.append((cursor, start, after_held))
        cursor, after_held = max(cursor, end), True
    gaps.append((cursor, math.inf, after_held))
    return gaps
