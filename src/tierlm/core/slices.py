"""Each running job's slice, counted in its share of the device's time.

docs/design.md §4.7 (fairness in a batch): a step's time is shared equally by the
sequences in it, so a job running beside n - 1 others uses its slice n times
more slowly than alone. Counted in wall time instead, a batch of 8 would cut
each job at every slice of the clock, rotating producers eight times as often
as fairness asks; 32 streams on 8 llama.cpp slots then lost a quarter of
their throughput to the hand-overs (bench/vs_llama_server.py). With one slot
the share is all of it: the slice is the wall-clock slice, as before.

A slice is a producer's turn (docs/design.md §4.4 (turns)), so a pool job counts
its producer's share: m of its producer's jobs among n running use each of
their slices at m / n. Counted per job alone, a producer holding all 8 slots
used a slice in eight times its length, and one arriving beside it waited as
long for a slot (docs/design.md §4.7 (fairness in a batch)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tierlm.core.jobs import Job

__all__ = ["RESUME_SHARE", "SliceClocks", "turn_of"]

RESUME_SHARE = 0.25
"""docs/design.md §4.6 (a slice worth its resume): a fair slice never cuts a job
whose resume would redo more than this share of the slice. A backend without
KV restore re-evaluates the prompt on resume; a 20 000-token prompt (10 s) cut
at every 4 s slice advanced about a token per turn and finished after 414 s
instead of 30 s, the device spending ~90 % re-evaluating. A quarter keeps the
re-evaluation to at most a quarter of each of the job's turns, while prompts of
up to 0.75 s (most of them) still rotate at the default 3 s slice."""

_EPSILON = 1e-9  # float slack on timer instants (a boundary must be hit, not missed)


def turn_of(job: Job) -> str | None:
    """Whose turn a job's slice is part of: its producer's, in the pool."""
    return job.producer if job.task_class.fair else None


class SliceClocks:
    """The device time each running job has had since its slice began; a job
    whose slice has not begun (it waits for its swap) holds None."""

    def __init__(self, slice_seconds: float) -> None:
        self.slice = slice_seconds
        self._used: dict[int, float | None] = {}
        self._turn: dict[int, str | None] = {}
        """Each running job's producer in the pool (None: a job outside it,
        whose turn is its own)."""
        self._turns: dict[str, tuple[float, float]] = {}
        """Per producer whose job just ended: (the slice it had used, when)."""
        self._clock = 0.0
        self.evaluations: Mapping[int, float] = {}
        """The last decision's ``Device.evaluations``: what each running job's
        resume would redo (docs/design.md §4.6 (a slice worth its resume))."""

    def length(self, job_id: int) -> float:
        """Its slice: the configured one, or longer so that what a resume
        would redo is at most RESUME_SHARE of it. A runner that restores KV
        reports no evaluations, and one whose resumes prove cheap measures
        that on its next run: the configured slice again."""
        return max(self.slice, self.evaluations.get(job_id, 0.0) / RESUME_SHARE)

    def _tick(self, now: float) -> None:
        """Share the time since the last change among the running jobs."""
        elapsed = now - self._clock
        if elapsed > 0 and self._used:
            for job_id, used in self._used.items():
                if used is not None:
                    self._used[job_id] = used + elapsed * self._rate(job_id)
        self._clock = max(self._clock, now)

    def _rate(self, job_id: int) -> float:
        """How fast its slice runs: its producer's share of the pool's running
        sequences (a job outside the pool: its share of the running set).
        People's sequences above the pool are left out: a turn is a share of
        what the pool has, and with two chats and one pool job in the batch
        that job holds all of it; counted among the chats, its slice ran at a
        third of the clock and a producer waiting beside it for the one slot
        the chat latency guard left waited three slices (docs/design.md §4.7 (fairness in a
        batch))."""
        if len(self._used) == 1:
            return 1.0  # alone: what either count below comes to
        turn = self._turn.get(job_id)
        if turn is None:
            return 1 / len(self._used)
        turns = [t for t in self._turn.values() if t is not None]
        return sum(1 for t in turns if t == turn) / len(turns)

    def start(self, job_id: int, now: float, *, begun: bool, turn: str | None = None) -> None:
        """A job holds a slot; its slice begins now, or when ``restart`` says.

        ``turn``: its producer. A producer whose job ended at this instant,
        not preempted, goes on with the slice it was in (docs/design.md §4.4 (turns)): a job that
        finished 3.5 s into a 4 s slice leaves its
        successor 0.5 s, not a fresh 4 s, or a producer of short jobs would
        hold the device for up to two slices at a turn."""
        if self._used:
            self._tick(now)
        elif now > self._clock:
            self._clock = now  # ``_tick`` with nothing running
        carried = self._turns.pop(turn, None) if turn is not None else None
        used = 0.0
        if carried is not None and abs(carried[1] - now) <= _EPSILON:
            used = carried[0]
        self._used[job_id] = used if begun else None
        self._turn[job_id] = turn

    def restart(self, job_id: int, now: float) -> None:
        """Its slice begins now (its swap ended)."""
        self._tick(now)
        self._used[job_id] = 0.0

    def stop(self, job_id: int, now: float, *, turn: str | None = None) -> None:
        """A job left its slot; ``turn``: its producer, whose next job started
        at this instant continues its slice (``start``)."""
        self._tick(now)
        used = self._used.pop(job_id, None)
        self._turn.pop(job_id, None)
        if turn is not None and used is not None:
            self._turns[turn] = (used % self.length(job_id), now)

    def turn_left(self, turn: str, now: float) -> bool:
        """Whether ``turn``'s producer had a job end with its slice not used
        up, and has not started another since (its next job would go on with it)."""
        carried = self._turns.get(turn)
        return carried is not None and carried[0] < self.slice - _EPSILON

    def end_turn(self, turn: str) -> None:
        """The producer's turn ended (its job was preempted): its next starts afresh."""
        self._turns.pop(turn, None)

    def begun(self, job_id: int) -> bool:
        return self._used.get(job_id) is not None

    def _used_at(self, job_id: int, now: float) -> float | None:
        used = self._used.get(job_id)
        if used is None:
            return None
        return used + max(0.0, now - self._clock) * self._rate(job_id)

    def in_slice(self, job_id: int, now: float) -> bool:
        """Whether its current slice still has time in it (a job whose slice
        has not begun is in it)."""
        used = self._used_at(job_id, now)
        return used is None or used < self.length(job_id) - _EPSILON

    def next_end(self, job_id: int, now: float) -> float:
        """When its current slice ends, if the running set stays as it is (a
        change is an event, after which this is asked again)."""
        begun = self._used.get(job_id)
        assert begun is not None
        rate = self._rate(job_id)  # ``_used_at``'s and the answer's, asked once
        used = begun + max(0.0, now - self._clock) * rate
        length = self.length(job_id)
        remaining = length * max(1, math.ceil(used / length)) - used
        if remaining <= _EPSILON:
            remaining += length
        return now + remaining / rate
