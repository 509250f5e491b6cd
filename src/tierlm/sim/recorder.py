"""Turns the scheduler's events into per-job records (submit, runs, swaps, end)."""

from __future__ import annotations

from tierlm.sim.records import FOREGROUND_NONE, JobRecord, RunRecord
from tierlm.snapshot import EventKind, SchedulerEvent

__all__ = ["Recorder"]


class Recorder:
    """A scheduler listener. The engine sets ``pending`` to the record of the job
    it is about to submit; the SUBMITTED event files it under the job's id
    (before any STARTED, which the shell may emit inside ``submit``)."""

    def __init__(self) -> None:
        self.records: dict[int, JobRecord] = {}
        self.pending: JobRecord | None = None
        self.foreground: list[tuple[float, str]] = []

    def __call__(self, event: SchedulerEvent) -> None:
        kind = event.kind
        if kind is EventKind.FOREGROUND:
            foreground = event.detail.get("foreground")
            name = foreground.class_name if foreground is not None else FOREGROUND_NONE
            self.foreground.append((event.time, name))
            return
        job = event.job
        if job is None:
            return
        if kind is EventKind.SUBMITTED:
            record, self.pending = self.pending, None
            if record is not None:
                record.id = job.id
                self.records[job.id] = record
            return
        rec = self.records.get(job.id)
        if rec is None:
            return
        run = rec.runs[-1] if rec.runs else None
        if kind is EventKind.STARTED:
            rec.runs.append(RunRecord(event.time))
        elif kind is EventKind.SWAP_STARTED and run is not None:
            run.swap_start = event.time
            rec.swaps += 1
        elif kind is EventKind.SWAP_FINISHED and run is not None:
            run.swap_end = event.time
            rec.swap_seconds += float(event.detail.get("seconds", 0.0))
        elif kind is EventKind.PREEMPTING:
            rec.preemptions += 1
        elif kind in (
            EventKind.REQUEUED,
            EventKind.COMPLETED,
            EventKind.FAILED,
            EventKind.CANCELLED,
        ):
            if run is not None and run.end is None:
                run.end = event.time
                run.how = kind.value
                if run.swap_start is not None and run.swap_end is None:
                    run.swap_end = event.time  # a swap that failed or was cut
            if kind is EventKind.REQUEUED:
                return
            rec.ended = event.time
            if kind is EventKind.CANCELLED:
                shutdown = event.detail.get("reason") == "shutdown"
                rec.outcome = "unfinished" if shutdown else "cancelled"
            else:
                rec.outcome = kind.value
