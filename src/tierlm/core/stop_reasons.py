"""Why a job is told to stop: the one word the policy core, the shell and the
runners share (docs/design.md §4.6 (preemption kinds)).

The policy answers ``CancelReason.YIELD`` or ``CancelReason.PREEMPTED`` for a
running job it stops (``Decision.stop``), the shell cancels the job's token
with that same reason, and a runner reads it there. Pure, no I/O: core imports
no runner (docs/design.md §1), so the reason lives here and
``tierlm.runners.cancellation`` re-exports it.

How a generation ended (max tokens, end of sequence, cancelled, ...) is a
different thing, the outcome: ``tierlm.runners.llama_cpp.wire.messages.Ended``.
"""

from __future__ import annotations

import enum

__all__ = ["CancelReason"]


class CancelReason(enum.Enum):
    """Why a job was told to stop (docs/design.md §4.6 (preemption kinds)).

    ``YIELD`` and ``PREEMPTED`` are the two kinds of preemption, the two a
    policy decides: both re-queue a re-queueable job, but only ``PREEMPTED``
    (a person is waiting) may cut a prompt evaluation short
    (``CancelToken.aborts_prompt``). Cut, an evaluation is lost (llama.cpp
    drops the aborted batch), and a prompt longer than a slice would be cut at
    every slice and never finish: so fairness yields.
    """

    YIELD = "yielded"
    """The job yields the device for fairness (its slice, the pool floor,
    overdue work, any tier below a person's, the chat latency guard): it stops
    at its next token boundary, but a prompt evaluation under way runs to its
    first token first; the job may be re-queued (one that is not ends as
    ``PREEMPTED``: to its caller, the kinds are alike)."""
    PREEMPTED = "preempted"
    """A person is waiting (T0 or T1 work: a chat, the foreground): the job
    stops at its next token boundary, a prompt evaluation at once; the job may
    be re-queued."""
    CALLER = "cancelled by caller"
    """The submitter called ``JobHandle.cancel()`` (or stopped reading a stream)."""
    SHUTDOWN = "shutdown"
    """The scheduler is closing."""
    READER_LEFT = "reader left"
    """A runner's own: the stream's reader stopped iterating (closed it or
    went away). No token carries it; a runner tells its device."""

    @property
    def preempts(self) -> bool:
        """The job goes back to the queue and resumes: a runner keeps its KV
        state (docs/design.md §4.9)."""
        return self in (CancelReason.PREEMPTED, CancelReason.YIELD)

    def stops(self, produced: int) -> bool:
        """Does a generation that has produced ``produced`` tokens stop now
        (at a token boundary, or inside its prompt evaluation)? A yield waits
        for the first token; every other reason stops it at once."""
        return produced > 0 or self is not CancelReason.YIELD

    def replaces(self, current: CancelReason | None) -> bool:
        """Does this reason replace ``current``, a job's reason so far? A
        stronger one does (``YIELD`` < ``PREEMPTED`` < ``CALLER``,
        ``SHUTDOWN``, ``READER_LEFT``); of two equal ones the first is kept."""
        return current is None or _STRENGTH[self] > _STRENGTH[current]


_STRENGTH = {
    CancelReason.YIELD: 0,
    CancelReason.PREEMPTED: 1,
    CancelReason.CALLER: 2,
    CancelReason.SHUTDOWN: 2,
    CancelReason.READER_LEFT: 2,
}
