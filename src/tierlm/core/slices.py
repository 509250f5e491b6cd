"""Each running job's slice, counted in its share of the device's time.

docs/design.md §4.7 fairness in a batch: a step's time is shared equally by the
sequences in it, so a job running beside n - 1 others uses its slice n times
more slowly than alone. Counted in wall time instead, a batch of 8 would cut
each job at every slice of the clock, rotating producers eight times as often
as fairness asks; 32 streams on 8 llama.cpp slots then lost a quarter of
their throughput to the hand-overs (bench/vs_llama_server.py). With one slot
the share is all of it: the slice is the wall-clock slice, as before.
"""

from __future__ import annotations

import math

__all__ = ["SliceClocks"]

_EPSILON = 1e-9  # float slack on timer instants (a boundary must be hit, not missed)


class SliceClocks:
    """The device time each running job has had since its slice began; a job
    whose slice has not begun (it waits for its swap) holds None."""

    def __init__(self, slice_seconds: float) -> None:
        self.slice = slice_seconds
        self._used: dict[int, float | None] = {}
        self._clock = 0.0

    def _tick(self, now: float) -> None:
        """Share the time since the last change among the running jobs."""
        elapsed = now - self._clock
        if elapsed > 0 and self._used:
            share = len(self._used)
            for job_id, used in self._used.items():
                if used is not None:
                    self._used[job_id] = used + elapsed / share
        self._clock = max(self._clock, now)

    def start(self, job_id: int, now: float, *, begun: bool) -> None:
        """A job holds a slot; its slice begins now, or when ``restart`` says."""
        self._tick(now)
        self._used[job_id] = 0.0 if begun else None

    def restart(self, job_id: int, now: float) -> None:
        """Its slice begins now (its swap ended)."""
        self._tick(now)
        self._used[job_id] = 0.0

    def stop(self, job_id: int, now: float) -> None:
        self._tick(now)
        self._used.pop(job_id, None)

    def begun(self, job_id: int) -> bool:
        return self._used.get(job_id) is not None

    def _used_at(self, job_id: int, now: float) -> float | None:
        used = self._used.get(job_id)
        if used is None:
            return None
        return used + max(0.0, now - self._clock) / len(self._used)

    def in_slice(self, job_id: int, now: float) -> bool:
        """Whether its current slice still has time in it (a job whose slice
        has not begun is in it)."""
        used = self._used_at(job_id, now)
        return used is None or used < self.slice - _EPSILON

    def next_end(self, job_id: int, now: float) -> float:
        """When its current slice ends, if the running set stays as it is (a
        change is an event, after which this is asked again)."""
        used = self._used_at(job_id, now)
        assert used is not None
        remaining = self.slice * max(1, math.ceil(used / self.slice)) - used
        if remaining <= _EPSILON:
            remaining += self.slice
        return now + remaining * len(self._used)
