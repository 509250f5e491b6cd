"""Who holds each slot of a batched device: one plan per step (docs/design.md §4.7).

A policy that knows how to rank one sequence at a time (``SlotRules``: the next
job it would run, whether a running one should stop) gets its k-slot plan from
``plan``, so that every policy, ours and the baselines, fills and empties slots
by the same rules:

- The running set is the best k of queue + running, all on the loaded model:
  free slots are filled best first; a job on another model starts only on an
  empty device (a swap empties every slot), and while it waits no new
  sequence joins the batch, so the device drains to it.
- A better job needs only one slot: when none is free (or the chat latency
  guard below leaves none for it), the lowest-ranked running sequence that
  the policy would stop for it is stopped, one at a time (a stop under way
  frees the next slot). A swap needs every slot: each
  running sequence the policy would stop is stopped.
- A job whose work drives the runner itself (``ctx.runner``) holds one slot,
  like any job: it never makes the others yield (a person's chat among them
  was cancelled that way), it only restarts when it is stopped itself.
- The chat latency guard: while a person's sequence (T0, T1) runs, the batch
  is cut to the largest size whose step time stays within ``chat_slowdown`` of
  one sequence's, by the runner's step-time curve; while its prompt is still
  evaluated, within ``PROMPT_SLOWDOWN`` (the first token is what a person
  waits for). The sequences left out yield (their KV kept, docs/design.md §2.3) and rejoin when it
  ends. With deadlines on time, pressing deadline
  work is not cut (``shielded``, docs/design.md §4.8).

With one slot this is exactly the single-sequence shell: start the pick when
the device is free, else ask whether the running job should stop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from tierlm.core.classes import T0, T1
from tierlm.core.device import Decision, Device
from tierlm.core.jobs import Job, Person
from tierlm.core.stop_reasons import CancelReason

__all__ = ["PROMPT_SLOWDOWN", "SlotRules", "guard_cap", "plan"]

PROMPT_SLOWDOWN = 1.05
"""docs/design.md §4.7: how much slower than alone a person's prompt may be
evaluated beside the batch. The first token is what a person waits for, and
tierlm promises it within 5 % of an idle device's (``tierlm demo``'s target);
on the CPU curve that is the person's sequence alone (a prompt evaluation is
short: a few hundred ms), on a GPU's flat curve the whole batch."""


class SlotRules(Protocol):
    """What a policy answers about one sequence at a time."""

    def peek(self, now: float, loaded_model: str | None) -> Job | None:
        """The job it would run next on a free slot (left in the queue), or None
        (nothing queued, or waiting for a better moment)."""

    def take(self, job: Job, now: float) -> None:
        """``job`` (from ``peek``) leaves the queue and starts now."""

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        """Whether to stop ``running`` for the best of the queue and it."""

    def next_wakeup(self, now: float) -> float | None:
        """When the answers may change with no event."""

    def tier(self, job: Job, now: float) -> int:
        """The job's effective tier now."""


def guard_cap(step_cost: Sequence[float], chat_slowdown: float | None, slots: int) -> int:
    """The largest batch a person's sequence may share (docs/design.md §4.7 (chat latency guard)):
    its step time within ``chat_slowdown`` of one
    sequence's. No curve (or no guard): every slot."""
    if chat_slowdown is None or not step_cost:
        return slots
    alone = step_cost[0]
    cap = 1
    for n, cost in enumerate(step_cost[:slots], start=1):
        if cost <= alone * chat_slowdown + 1e-12:
            cap = n
    return cap


def plan(
    rules: SlotRules,
    now: float,
    device: Device,
    chat_slowdown: float | None = None,
    people_waiting: Callable[[], Collection[Person]] | None = None,
    shielded: Callable[[Job, float], bool] | None = None,
    relieved: bool = False,
) -> Decision:
    """The k-slot plan of the module docstring, from ``rules``' answers;
    ``people_waiting``: the persons (``Job.chat_person``) with a chat queued, for
    persons in turn on a full device (tierlm's rule, docs/design.md §4.7);
    ``shielded``: background the chat latency guard neither cuts nor keeps
    out (pressing deadline work, with deadlines on time: docs/design.md §4.8);
    ``relieved``: people have held the device long enough that the guard
    keeps one background sequence (docs/design.md §4.7 (guard relief))."""
    loaded = device.loaded_model
    if device.slots == 1 and not device.running and device.can_start:
        # One free slot: what the rules below come to (no guard, no turns,
        # nothing to stop), the single-sequence shell's pick, asked directly.
        job = rules.peek(now, loaded)
        if job is None:
            return Decision((), (), rules.next_wakeup(now))
        rules.take(job, now)
        return Decision((job,), (), rules.next_wakeup(now))
    staying = [j for j in device.running if j.id not in device.stopping]
    starts: list[Job] = []
    cap = guard_cap(device.step_cost, chat_slowdown, device.slots)
    prompt_cap = min(cap, guard_cap(device.step_cost, PROMPT_SLOWDOWN, device.slots))

    # Whether a job is a person's (T0, T1) and whether the guard may cut it
    # cannot change within one plan (a class, the foreground, a deadline's
    # lead): each is asked once per job, not at every slot.
    people: dict[int, bool] = {}
    guard: dict[int, bool] = {}

    def persons(job: Job) -> bool:
        known = people.get(job.id)
        if known is None:
            known = people[job.id] = rules.tier(job, now) <= T1
        return known

    def person(jobs: Iterable[Job]) -> bool:
        return any(persons(j) for j in jobs)

    def guarded(job: Job) -> bool:
        """Background the chat latency guard may cut or keep out."""
        known = guard.get(job.id)
        if known is None:
            known = guard[job.id] = not persons(job) and (
                shielded is None or not shielded(job, now)
            )
        return known

    def person_evaluating(jobs: Iterable[Job]) -> bool:
        return any(persons(j) and j.id not in device.decoding for j in jobs)

    def limit_now() -> int:
        if chat_slowdown is not None and (person_evaluating(staying) or person_evaluating(starts)):
            return prompt_cap
        if person(staying) or person(starts):
            return cap
        return device.slots

    def room_for(job: Job) -> bool:
        if device.free - len(starts) <= 0:
            return False
        if not guarded(job):
            # docs/design.md §4.7 (rule 3): the guard shields people from
            # background, never from each other nor a page from its own work
            # (nor, with deadlines on time, from pressing work: §4.8).
            return True
        if relieved and not any(guarded(j) for j in (*staying, *starts)):
            return True  # guard relief: one background sequence stays
        return len(staying) + len(starts) < limit_now()

    draining = False
    no_room = False  # the best waiting job found no room (slots or the guard)
    while device.can_start and device.free - len(starts) > 0:
        job = rules.peek(now, loaded)
        if job is None:
            break
        if not room_for(job):
            no_room = True
            break
        if job.model_id != loaded and (device.running or starts):
            draining = True  # its swap waits for an empty device
            break
        rules.take(job, now)
        starts.append(job)
        if job.model_id != loaded:
            break  # it swaps, alone

    stops: list[tuple[Job, CancelReason]] = []
    # A yield under way is asked again: a person's preemption then cuts its
    # prompt evaluation short (docs/design.md §4.6 (preemption kinds)).
    for job in device.running:
        yielding = device.stopping.get(job.id) is CancelReason.YIELD
        if yielding and rules.should_preempt(job, now, loaded) is CancelReason.PREEMPTED:
            stops.append((job, CancelReason.PREEMPTED))
    # No room for the best waiting job: the slots are full, or the chat latency
    # guard cut the batch; either way a running job past its slice yields to it
    # (docs/design.md §4.7 (fairness in a batch)). Asked only on a full device,
    # two producers sharing the one slot the guard leaves never took turns.
    full = no_room or len(device.running) + len(starts) >= device.slots
    if staying and (full or draining):
        # Lowest-ranked first; among equals the latest started (it has the least sunk).
        order = sorted(reversed(staying), key=lambda j: -rules.tier(j, now))
        one_at_a_time = not draining
        batch = len(staying)
        need: int | None = None  # asked only once a stop is under way (it peeks)
        for job in order:
            if one_at_a_time and (device.stopping or stops):
                if need is None:
                    need = _slots_needed(rules, now, device, batch, prompt_cap, chat_slowdown)
                if len(device.stopping) + len(stops) >= need:
                    break  # enough slots are already being freed
            preemption = rules.should_preempt(job, now, loaded)
            if preemption is not None:
                stops.append((job, preemption))
                staying.remove(job)
    if people_waiting is not None and device.free - len(starts) <= 0:
        stopping = [j for j in device.running if j.id in device.stopping] + [j for j, _ in stops]
        turns = _turn_stops(rules, now, staying, people_waiting, stopping)
        stops.extend((job, CancelReason.YIELD) for job in turns)
        staying = [job for job in staying if job not in turns]
    # The chat latency guard cuts the batch around a person's sequence.
    if person(staying) or person(starts):
        over = len(staying) + len(starts) - limit_now()
        if over > 0:
            background = [j for j in reversed(staying) if guarded(j)]
            background.sort(key=lambda j: -rules.tier(j, now))
            if relieved and not any(guarded(j) for j in starts):
                over = min(over, len(background) - 1)  # guard relief: one stays
            # While the person's prompt evaluates, a person waits: the cut
            # sequences stop at once, a prompt evaluation of theirs too (§4.6).
            waiting = person_evaluating(staying) or person_evaluating(starts)
            how = CancelReason.PREEMPTED if waiting else CancelReason.YIELD
            stops.extend((job, how) for job in background[:over])
    return Decision(tuple(starts), tuple(stops), rules.next_wakeup(now))


def _turn_stops(
    rules: SlotRules,
    now: float,
    staying: list[Job],
    people_waiting: Callable[[], Collection[Person]],
    stopping: list[Job],
) -> list[Job]:
    """docs/design.md §4.7 (persons in turn on slots): on a device full of people's
    sequences, each person with a chat queued and no slot gets one from the
    person holding the most (while they hold two or more), whose latest
    sequence yields and resumes later, its text kept (§4.9). Named persons
    share their key's turn (§4.2): first the keys take slots from each other
    so, then a key's named persons among its own slots."""
    held: dict[Person, list[Job]] = {}
    for job in staying:  # in start order: the last of each list started last
        if rules.tier(job, now) == T0:
            held.setdefault(job.chat_person[:1], []).append(job)
    if all(len(jobs) < 2 for jobs in held.values()):
        return []  # no key holds more than one slot (asked first: it is O(1))
    waiting = set(people_waiting())
    stops = _take(held, {p[:1] for p in waiting}, len(stopping))
    for key, jobs in held.items():
        if len(jobs) < 2:
            continue
        mine: dict[Person, list[Job]] = {}
        for job in jobs:
            mine.setdefault(job.chat_person, []).append(job)
        named = {p for p in waiting if p[:1] == key}
        freeing = sum(job.chat_person[:1] == key for job in (*stopping, *stops))
        stops += _take(mine, named, freeing)
    return stops


def _take(held: dict[Person, list[Job]], waiting: set[Person], freeing: int) -> list[Job]:
    """The sequences that yield so that each of ``waiting`` without a slot
    gets one: the latest of whoever holds the most, while two or more
    (``freeing``: slots already being freed). Takes them out of ``held``."""
    need = len(waiting - set(held)) - freeing
    stops: list[Job] = []
    while need > 0 and held:
        person = max(held, key=lambda p: len(held[p]))
        mine = [job for job in held[person] if job.resumable]
        if len(held[person]) < 2 or not mine:
            break
        # Among a key's slots, its named person holding the most yields.
        victim = _latest_of_most(mine)
        stops.append(victim)
        held[person].remove(victim)
        need -= 1
    return stops


def _latest_of_most(jobs: list[Job]) -> Job:
    counts: dict[Person, int] = {}
    for job in jobs:
        counts[job.chat_person] = counts.get(job.chat_person, 0) + 1
    most = max(counts.values())
    return next(job for job in reversed(jobs) if counts[job.chat_person] == most)


def _slots_needed(
    rules: SlotRules,
    now: float,
    device: Device,
    batch: int,
    prompt_cap: int,
    chat_slowdown: float | None,
) -> int:
    """How many of the ``batch`` running sequences (those not already being
    stopped) a full device stops for the best waiting job: one slot; for a
    person's, as many as the latency guard would cut once it starts (its
    prompt evaluates within ``PROMPT_SLOWDOWN``), all at the same step
    boundary, so that its prompt does not share the first step with sequences
    stopped one step later (docs/design.md §4.7)."""
    if chat_slowdown is None:
        return 1
    waiting = rules.peek(now, device.loaded_model)
    if waiting is None or rules.tier(waiting, now) > T1:
        return 1
    return max(1, batch - (prompt_cap - 1))
