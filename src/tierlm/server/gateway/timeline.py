"""Who held the device when: the dashboard's timeline, built from scheduler events.

Items are runs (a job on the device, from start to its end and how it ended),
swaps, and marks (a preemption, a foreground change, pause/resume). Closed items
get increasing sequence numbers, so a live view fetches only what is new; the
open runs and swap are reported separately. Items older than ``window`` are dropped.

A batched device runs several jobs at once (docs/design.md §2.3): every
job started holds an open run until it ends, each on a ``lane`` (the lowest
lane free when it started), so a view draws a lane per slot and the batch
size over time; one open run overwritten by the next showed a busy batch as
an idle device.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from tierlm.shell.events import (
    ForegroundChanged,
    JobStarted,
    ModelReturned,
    Paused,
    Preempting,
    Requeued,
    Resumed,
    RunEnded,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)

__all__ = ["Timeline"]

# A bound on memory whatever the event rate (the window bounds it by time too).
MAX_ITEMS = 2000


class Timeline:
    def __init__(self, window: float) -> None:
        self.window = window
        self._seq = itertools.count(1)
        self.items: deque[dict[str, Any]] = deque(maxlen=MAX_ITEMS)
        self.open_runs: dict[int, dict[str, Any]] = {}
        """The runs on the device now, by job id, in the order they started."""
        self.open_swap: dict[str, Any] | None = None
        self.lanes = 1
        """Lanes used so far: the most jobs that ran at once."""

    @property
    def open_run(self) -> dict[str, Any] | None:
        """The run started last of those on the device (None: idle)."""
        return next(reversed(self.open_runs.values()), None)

    def _free_lane(self) -> int:
        busy = {run["lane"] for run in self.open_runs.values()}
        lane = next(i for i in range(len(busy) + 1) if i not in busy)
        self.lanes = max(self.lanes, lane + 1)
        return lane

    def on_event(self, event: SchedulerEvent) -> None:
        match event:
            case JobStarted(job=job):
                previous = self.open_runs.pop(job.id, None)
                lane = previous["lane"] if previous is not None else self._free_lane()
                self.open_runs[job.id] = {
                    "kind": "run",
                    "job": job.id,
                    "class": job.class_name,
                    "producer": job.producer,
                    "model": job.model_id,
                    "start": event.time,
                    "lane": lane,
                }
            case SwapStarted(job=job, previous=previous):
                self.open_swap = {
                    "kind": "swap",
                    "model": job.model_id,
                    "previous": previous,
                    "start": event.time,
                }
            case SwapFinished():
                self._close_swap(event.time)
            case ModelReturned(model_id=model_id, previous=previous, seconds=seconds):
                self._add(
                    {
                        "kind": "swap",
                        "model": model_id,
                        "previous": previous,
                        "start": event.time - seconds,
                        "end": event.time,
                    }
                )
            case Preempting(job=job):
                self._add(
                    {
                        "kind": "mark",
                        "what": "preempt",
                        "job": job.id,
                        "class": job.class_name,
                        "time": event.time,
                    }
                )
            case RunEnded(job=job):
                run = self.open_runs.pop(job.id, None)
                if run is not None:
                    self._close_swap(event.time)  # a failed swap ends with its job
                    how = "preempted" if isinstance(event, Requeued) else event.outcome
                    self._add({**run, "end": event.time, "how": how})
            case ForegroundChanged(foreground=fg):
                label = (
                    "foreground: none"
                    if fg is None
                    else f"foreground: {fg.class_name}"
                    + (f" / {fg.subject}" if fg.subject is not None else "")
                )
                self._add(
                    {"kind": "mark", "what": "foreground", "label": label, "time": event.time}
                )
            case Paused() | Resumed():
                what = "paused" if isinstance(event, Paused) else "resumed"
                self._add({"kind": "mark", "what": what, "label": what, "time": event.time})
        self._trim(event.time)

    def _close_swap(self, now: float) -> None:
        if self.open_swap is not None:
            self._add({**self.open_swap, "end": now})
            self.open_swap = None

    def _add(self, item: dict[str, Any]) -> None:
        item["seq"] = next(self._seq)
        self.items.append(item)

    def _trim(self, now: float) -> None:
        horizon = now - self.window
        while self.items and self.items[0].get("end", self.items[0].get("time", now)) < horizon:
            self.items.popleft()

    def since(self, seq: int) -> list[dict[str, Any]]:
        """Closed items newer than ``seq`` (0: all kept)."""
        return [item for item in self.items if item["seq"] > seq]

    @property
    def last_seq(self) -> int:
        return self.items[-1]["seq"] if self.items else 0
