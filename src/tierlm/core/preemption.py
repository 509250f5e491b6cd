"""Whether a running job stops for the best of the queue, and how
(docs/design.md §4.6 (preemption kinds)): the rank comparison of
``TieredPolicy.should_preempt``, as a pure function of the two ranks.

- A higher tier stops the running job: ``PREEMPT`` when a person waits (T0,
  T1), else ``YIELD``, which loses no prompt evaluation: the runner stops at
  the first token, or at a chunk's end its KV snapshot keeps (§4.9).
- Budgeted work at its own tier never preempts: otherwise each time its share
  dipped under the cap it would cut a fair-pool job short (§4.3).
- Foreground flapping: the surface the person just left keeps its running
  evaluation; the new one waits for its next token (``YIELD``).
- Fairness stops only what goes back to the queue and loses nothing there:
  a job that would start over, cut at every slice, could never finish. Inside
  the pool, a job past its slice yields to another producer's; overdue work
  waiting for the pool's floor yields to the pool.
"""

from __future__ import annotations

from tierlm.core.classes import T1, T2, T3, T4
from tierlm.core.queues import T3_AFTER_POOL
from tierlm.core.stop_reasons import CancelReason

__all__ = ["preemption"]


def preemption(
    run_rank: int,
    best_rank: int,
    *,
    best_budgeted: bool,
    person_just_left: bool,
    requeues_whole: bool,
    in_slice: bool,
) -> CancelReason | None:
    """How the running job (``run_rank``) stops for the best job (``best_rank``),
    or None. ``best_budgeted``: the best job's class has a budget;
    ``person_just_left``: the running job is on the surface the person just
    left (§4.6 (foreground flapping)); ``requeues_whole``: the running job goes back to the
    queue and resumes losing nothing; ``in_slice``: it is within its slice."""
    if best_rank >= T2 and best_budgeted:
        return None
    if best_rank < (T3 if run_rank == T3_AFTER_POOL else run_rank):
        # A higher tier (waiting for the floor leaves overdue work T3).
        if best_rank == T1 and person_just_left:
            return CancelReason.YIELD
        return CancelReason.PREEMPTED if best_rank <= T1 else CancelReason.YIELD
    if not requeues_whole:
        return None
    if run_rank == T3_AFTER_POOL:
        return CancelReason.YIELD if best_rank == T4 else None  # the pool is owed its floor
    if run_rank == best_rank == T4 and not in_slice:
        return CancelReason.YIELD
    return None
