"""Affinity and swaps (docs/design.md §4): given the best job overall (B) and the
best job on the loaded model, which one runs, or whether to wait.

- B's model is loaded (or none is): run B.
- B is T0 or T1 (a person is waiting): swap and run B.
- Same-model work first, falling through tiers, unless some model's best job
  has waited ``max_affinity_wait`` (the starvation bound, over every model):
  then swap to the one that has waited longest.
- Otherwise swap to B, but not while a person may type again on the loaded
  model (``SwapHolds``: chat_grace, chat_idle with the chat page open; the
  grace capped by ski rental when the device would idle), nor for a moment
  after a job ends whose producer sends its next at once (``Anticipation``).
- Work that has waited ``max_affinity_wait`` gets its swap in the person's
  next chat idle gap despite the holds (seed scenario 6), and while a person
  may type, the device away from their model runs only such work, then
  returns (``Choice.return_to``): an excursion.
- With deadlines on time (``SchedulerConfig.deadlines``), pressing work (due
  within its lead, ``core/on_time``) on another model gets its swap as soon
  as no person's job is queued; and a swap holds until the job it was made
  for has run (``AffinityView.held``): only a person's work leaves its model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tierlm.core.anticipation import Anticipation
from tierlm.core.classes import T1
from tierlm.core.holds import SwapHolds
from tierlm.core.jobs import Job, due_or_never
from tierlm.core.model_scan import ModelScan
from tierlm.core.on_time import DeadlineMode

__all__ = ["Affinity", "AffinityView", "Choice"]


class Choice(NamedTuple):
    """The job to run (None: wait), and when that answer changes by itself."""

    job_id: int | None
    affinity_expiry: float | None = None
    hold_expiry: float | None = None
    return_to: str | None = None
    """With no job to run: load this model, the one a person may type on
    (docs/design.md §4.8 (excursions))."""


class AffinityView(NamedTuple):
    """What affinity sees at one pick (``Affinity.choose``)."""

    now: float
    loaded_model: str | None
    scan: ModelScan
    """The best candidates (``scan_models``): B (``scan.best``, not None),
    the loaded model's, the oldest and the overdue elsewhere."""
    best_job: Job
    """B's job."""
    loaded_job: Job | None
    """``scan.best_loaded``'s job."""
    person_model: str | None
    """The model a person may type on now (``SwapHolds.expecting``)."""
    chat_open: bool
    """The chat page is the foreground."""
    held: bool = False
    """With deadlines on time: the job the last swap was made for, on the
    loaded model, has yet to run (``DeadlineMode.holds_model``)."""


@dataclass(frozen=True, slots=True)
class Affinity:
    """The rules of the module doc, bound to the policy's holds, think
    times (``Anticipation``) and deadline mode."""

    max_affinity_wait: float
    holds: SwapHolds
    anticipation: Anticipation
    deadlines: DeadlineMode

    def choose(self, view: AffinityView) -> Choice:
        """B, the loaded model's best, or a wait (the module doc)."""
        scan, now, loaded_model = view.scan, view.now, view.loaded_model
        best, best_loaded, best_job, loaded_job = (
            scan.best,
            scan.best_loaded,
            view.best_job,
            view.loaded_job,
        )
        assert best is not None
        max_affinity_wait, holds, person_model = (
            self.max_affinity_wait,
            self.holds,
            view.person_model,
        )
        rank, _key, best_id = best
        if view.held and rank > T1 and best_loaded is not None:
            # docs/design.md §4.8 (on time): a swap holds until the work it was
            # made for ran, or a person's work needs the device; else pressing
            # work and work at the starvation bound took turns, a swap at each
            # slice's end.
            return Choice(best_loaded[2])
        deadlines = self.deadlines
        loaded_overdue = (
            deadlines.punctual
            and best_loaded is not None
            and loaded_job is not None
            and deadlines.presses(best_loaded[0], loaded_job, now)
        )
        if (
            person_model is not None
            and loaded_model is not None
            and loaded_model != person_model
            and rank > T1
        ):
            # docs/design.md §4.8 (excursions): away from the model a person may
            # type on, only work that has waited the bound runs, then the device
            # goes back, so the person's next message finds their model loaded.
            waited = loaded_job is not None and now >= loaded_job.submitted_at + max_affinity_wait
            if waited or loaded_overdue:
                assert best_loaded is not None
                return Choice(best_loaded[2])
            if best_job.model_id == person_model:
                return Choice(best_id)
            return Choice(None, return_to=person_model)
        overdue = scan.overdue  # set by deadlines on time only
        if overdue is not None and loaded_model is not None and rank > T1:
            # docs/design.md §4.8 (deadlines on time): the operator chose punctual
            # deadlines over the person's idle gap, so no hold and no gap bet; the
            # loaded model's overdue or pressing work due as early goes first (one
            # swap; else the device, draining for the swap, would keep it out).
            overdue_id, overdue_job = overdue
            other_due = due_or_never(overdue_job)
            if loaded_overdue and due_or_never(loaded_job) <= other_due:
                assert best_loaded is not None
                return Choice(best_loaded[2])
            loaded_pressing = scan.loaded_pressing
            if loaded_pressing is not None and due_or_never(loaded_pressing) <= other_due:
                return Choice(loaded_pressing.id)
            return Choice(overdue_id)
        if loaded_model is None or best_job.model_id == loaded_model:
            return Choice(best_id)
        if rank <= T1:
            return Choice(best_id)
        oldest = scan.oldest
        waiting_id, waiting = oldest if oldest is not None else (best_id, best_job)
        starve_at = min(best_job.submitted_at, waiting.submitted_at) + max_affinity_wait
        if now >= starve_at:
            # docs/design.md §4.8: no model's work waits past max_affinity_wait
            # for its swap, whichever model the pool would pick; the loaded
            # model's work that has waited as long goes first (one swap, a batch).
            older = waiting.submitted_at < best_job.submitted_at
            target_id, target = (waiting_id, waiting) if older else (best_id, best_job)
            loaded_older = loaded_job is not None and loaded_job.submitted_at <= target.submitted_at
            if loaded_older and not holds.presence.away:
                # With no AI surface open the swap goes now (docs/design.md §4.8
                # presence): after the loaded model's older work it met the
                # person back on a page, then their chat met the swap back.
                assert best_loaded is not None
                return Choice(best_loaded[2])
            present_until = starve_at + max_affinity_wait
            if holds.gap_fits(now, loaded_model, starve_at, target.model_id):
                # Seed scenario 6: it "waits for a chat idle gap", the first one
                # since it reached the bound that holds its excursion; a person
                # who chats every 45 s kept the hold alive forever (a job waited
                # 1 210 s).
                return Choice(target_id)
            # docs/design.md §4.8 (bets): the odds change as the person's
            # shorter gaps run out; look again then.
            retry = holds.next_bet_at(now, loaded_model)
        else:
            target_id, target = best_id, best_job
            present_until = float("inf")
            retry = None
            if best_loaded is not None:
                return Choice(best_loaded[2], affinity_expiry=starve_at)
            held = self.anticipation.hold_end(
                now, loaded_model, holds.swap_estimate(target.model_id)
            )
            if held is not None:
                return Choice(None, hold_expiry=min(held, starve_at))
        hold_end = holds.hold_end(
            now,
            loaded_model,
            target.model_id,
            chat_open=view.chat_open,
            idle=best_loaded is None,
            present_until=present_until,
        )
        if hold_end is not None and now < hold_end:
            if retry is not None and now < retry:
                hold_end = min(hold_end, retry)
            return Choice(best_loaded[2] if best_loaded is not None else None, hold_expiry=hold_end)
        return Choice(target_id)
