"""Foreground flapping (docs/design.md §4.6): what the surface a person just
left keeps when the foreground changes under its running work.

- For one slice after the person leaves a surface, its running evaluation is
  not cut for the new one: it yields (finishes the evaluation, makes its
  first token, then stops, its KV kept).
- On a runner that cannot restore KV, a run that redid an evaluation because
  flapping cut its job before keeps the device until it is worth that redo,
  as a slice is (``RESUME_SHARE``): cut after its first token at every flip,
  a job redid its prompt for each token, and 6 jobs completed in 300 s.
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlm.core.jobs import Foreground, Job
from tierlm.core.slices import RESUME_SHARE

__all__ = ["Flapping"]


class Flapping:
    """The surface just left, and the jobs that a foreground change cut."""

    __slots__ = ("_cut", "_left", "_resumed", "_run_started", "slice")

    def __init__(self, slice_seconds: float) -> None:
        self.slice = slice_seconds
        self._left: tuple[Foreground, float] | None = None
        self._run_started: dict[int, float] = {}
        self._cut: set[int] = set()  # queued again after a foreground change cut them
        self._resumed: set[int] = set()  # ... and running again

    def left(self, foreground: Foreground, now: float) -> None:
        """The person left ``foreground``."""
        self._left = (foreground, now + self.slice)

    def started(self, job: Job, now: float) -> None:
        self._run_started[job.id] = now
        if job.id in self._cut:
            self._cut.discard(job.id)
            self._resumed.add(job.id)

    def ended(self, job: Job) -> None:
        """Its run ended (it may be queued again)."""
        self._run_started.pop(job.id, None)
        self._resumed.discard(job.id)

    def removed(self, job: Job) -> None:
        """It left the queue for good."""
        self._cut.discard(job.id)

    def just_left(self, job: Job, now: float, redo: Mapping[int, float], wake: list[float]) -> bool:
        """Whether ``job`` is on the surface the person just left (within a
        slice of leaving it, or still owed its redo: ``owes_resume``)."""
        left = self._left
        return (
            left is not None
            and left[0].matches(job)
            and (now < left[1] or self.owes_resume(job, now, redo, wake))
        )

    def cut(self, job: Job) -> None:
        """A foreground change is about to stop it."""
        self._cut.add(job.id)

    def owes_resume(
        self, job: Job, now: float, redo: Mapping[int, float], wake: list[float]
    ) -> bool:
        """Whether its run, which redid ``redo[job.id]`` seconds of evaluation
        after a foreground change cut it, is not yet worth that redo; then
        the time it will be goes to ``wake``."""
        started = self._run_started.get(job.id)
        evaluation = redo.get(job.id, 0.0)
        if started is None or evaluation <= 0.0 or job.id not in self._resumed:
            return False
        until = started + evaluation / RESUME_SHARE
        if now < until:
            wake.append(until)
            return True
        return False
