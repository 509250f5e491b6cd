"""Why slots sit idle, read from one scheduler snapshot (docs/design.md §4.7),
for the dashboard and the state API: an operator who sees 3 of 8 slots
empty with work queued should not have to guess whether the scheduler is
stuck.

Each idle slot is explained by the first of these that holds:

- ``paused``: the scheduler is paused (``POST /v1/scheduler/pause``);
- ``swap``: a model is being loaded (a swap empties every slot), or all the
  queued work is for another model, so the device drains to the swap and no
  new sequence joins (§4.7 (rule 1); a chat hold may delay it, §4.8);
- ``budget``: the queued work on the loaded model is of classes at their
  budget's cap (§4.3);
- ``guard``: a person's sequence runs and the chat latency guard cut the
  background around it to keep its speed (§4.7 (rule 3), ``chat_slowdown``);
- ``no_work``: nothing is queued;
- ``starting``: work is queued and may run: the next decision fills the slot.
"""

from __future__ import annotations

from typing import Any

from tierlm.shell.snapshot import JobInfo, SchedulerSnapshot

__all__ = ["idle_slots"]

PERSON_TIERS = 1
"""Effective tiers up to this are a person's (T0) or the page in front (T1):
the latency guard shields them (§4.7 (rule 3))."""


def idle_slots(snap: SchedulerSnapshot, chat_slowdown: float) -> dict[str, Any]:
    """``{"slots", "busy", "idle", "why", "text", "detail"}`` (module docstring);
    ``why`` is None when no slot is idle."""
    busy = len(snap.running_jobs)
    idle = max(0, snap.slots - busy)
    why, text, detail = _why(snap, chat_slowdown) if idle else (None, "", "")
    return {
        "slots": snap.slots,
        "busy": busy,
        "idle": idle,
        "why": why,
        "text": text,
        "detail": detail,
    }


def _why(snap: SchedulerSnapshot, chat_slowdown: float) -> tuple[str, str, str]:
    queued = [job for jobs in snap.queued.values() for job in jobs]
    if snap.paused:
        return "paused", "paused", "the scheduler is paused: POST /v1/scheduler/resume"
    if snap.swapping_to is not None:
        return "swap", f"swap to {snap.swapping_to}", "a swap empties every slot until it ends"
    if not queued:
        return "no_work", "no work", "nothing is queued"
    loaded = snap.loaded_model
    here = [job for job in queued if job.model_id == loaded]
    if not here:
        models = sorted({job.model_id for job in queued})
        return (
            "swap",
            f"waiting to swap to {', '.join(models)}",
            f"{len(queued)} queued for another model: the device drains to the swap "
            "(after a chat, it may hold the model a while: scheduler.chat_grace)",
        )
    share = snap.budget_share
    capped = {name for name, cap in snap.budget_cap.items() if share.get(name, 0) >= cap}
    free = [job for job in here if job.class_name not in capped]
    if not free:
        shares = ", ".join(
            f"{name} {snap.budget_share.get(name, 0):.0%} of {snap.budget_cap[name]:.0%}"
            for name in sorted({job.class_name for job in here})
        )
        return "budget", "budget", f"{len(here)} queued of classes at their budget's cap: {shares}"
    people = [job for job in snap.running_jobs if job.tier <= PERSON_TIERS]
    background = [job for job in free if job.tier > PERSON_TIERS]
    if people and background:
        return (
            "guard",
            "chat latency guard",
            f"a person's sequence runs ({_who(people[0])}): the background beside it is cut "
            f"to keep its speed within {chat_slowdown:g}x of alone (scheduler.chat_slowdown); "
            f"{len(background)} background jobs wait",
        )
    return "starting", "starting", f"{len(free)} queued: the next decision fills the slot"


def _who(job: JobInfo) -> str:
    return f"#{job.id} {job.class_name}, {job.producer}"
