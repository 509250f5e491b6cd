"""Turns the scheduler's events into per-job records (submit, runs, swaps, end)."""

from __future__ import annotations

from tierlm.runners.cancellation import CancelReason
from tierlm.shell.events import (
    ForegroundChanged,
    JobCancelled,
    JobEvent,
    JobStarted,
    JobSubmitted,
    ModelReturned,
    Preempting,
    Requeued,
    RunEnded,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)
from tierlm.sim.records import FOREGROUND_NONE, JobRecord, RunRecord

__all__ = ["Recorder"]


class Recorder:
    """A scheduler listener: files a ``JobRecord`` per job at ``JobSubmitted``
    (before any ``JobStarted``, which the shell may emit inside ``submit``) and
    fills it from the job's later events."""

    def __init__(self) -> None:
        self.records: dict[int, JobRecord] = {}
        self.foreground: list[tuple[float, str]] = []
        self.returns: list[tuple[float, float]] = []

    def __call__(self, event: SchedulerEvent) -> None:
        if isinstance(event, ForegroundChanged):
            foreground = event.foreground
            name = foreground.class_name if foreground is not None else FOREGROUND_NONE
            self.foreground.append((event.time, name))
            return
        if isinstance(event, ModelReturned):
            self.returns.append((event.time - event.seconds, event.time))
            return
        if not isinstance(event, JobEvent):
            return
        job = event.job
        if isinstance(event, JobSubmitted):
            self.records[job.id] = JobRecord(
                id=job.id,
                class_name=job.class_name,
                producer=job.producer,
                model_id=job.model_id,
                subject=job.subject,
                deadline=job.deadline,
                submitted=job.submitted_at,
            )
            return
        rec = self.records.get(job.id)
        if rec is None:
            return
        run = rec.runs[-1] if rec.runs else None
        if isinstance(event, JobStarted):
            rec.runs.append(RunRecord(event.time))
        elif isinstance(event, SwapStarted) and run is not None:
            run.swap_start = event.time
            rec.swaps += 1
        elif isinstance(event, SwapFinished) and run is not None:
            run.swap_end = event.time
            rec.swap_seconds += event.seconds
        elif isinstance(event, Preempting):
            rec.preemptions += 1
        elif isinstance(event, RunEnded):
            if run is not None and run.end is None:
                run.end = event.time
                run.how = event.outcome
                if run.swap_start is not None and run.swap_end is None:
                    run.swap_end = event.time  # a swap that failed or was cut
            if isinstance(event, Requeued):
                return
            rec.ended = event.time
            if isinstance(event, JobCancelled):
                shutdown = event.reason is CancelReason.SHUTDOWN
                rec.outcome = "unfinished" if shutdown else "cancelled"
            else:
                rec.outcome = event.outcome
