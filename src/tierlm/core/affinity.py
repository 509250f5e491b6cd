"""Affinity and swaps (docs/design.md §4): given the best job overall (B) and the
best job on the loaded model, which one runs, or whether to wait.

- B's model is loaded (or none is): run B.
- B is T0 or T1 (a person is waiting): swap and run B.
- Same-model work first, falling through tiers, unless B has waited
  ``max_affinity_wait`` (the starvation bound).
- Otherwise swap to B, but not while a person may type again on the loaded
  model (``SwapHolds``: chat_grace, chat_idle with the chat page open, both
  capped by ski rental when the device would idle).
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlm.core.classes import Tier
from tierlm.core.holds import SwapHolds
from tierlm.core.jobs import Job
from tierlm.core.queues import Candidate

__all__ = ["Choice", "choose"]


@dataclass(slots=True)
class Choice:
    """The job to run (None: wait), and when that answer changes by itself."""

    job_id: int | None
    affinity_expiry: float | None = None
    hold_expiry: float | None = None


def choose(
    best: Candidate,
    best_job: Job,
    best_loaded: Candidate | None,
    *,
    now: float,
    loaded_model: str | None,
    max_affinity_wait: float,
    holds: SwapHolds,
    chat_open: bool,
) -> Choice:
    rank, _key, best_id = best
    if loaded_model is None or best_job.model_id == loaded_model:
        return Choice(best_id)
    if rank <= Tier.T1:
        return Choice(best_id)
    starve_at = best_job.submitted_at + max_affinity_wait
    if best_loaded is not None and now < starve_at:
        return Choice(best_loaded[2], affinity_expiry=starve_at)
    hold_end = holds.hold_end(
        now, loaded_model, best_job.model_id, chat_open=chat_open, idle=best_loaded is None
    )
    if hold_end is not None and now < hold_end:
        return Choice(best_loaded[2] if best_loaded is not None else None, hold_expiry=hold_end)
    return Choice(best_id)
