"""One decision of the tiered policy, one sequence at a time: the answers
``slots.plan`` asks for (``SlotRules``: the job a free slot would run,
whether a running one should stop, when the answers change), and what they
met on the way, carried in values, not in the policy's fields: each pick
(``Pick``) says when it would change by itself and which model an idle
device should go back to; the step gathers them for ``Decision.wake_at``
and ``Decision.load`` (docs/design.md §2.2, §4.8 (excursions)).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from tierlm.core.affinity import Affinity, AffinityView
from tierlm.core.anticipation import Anticipation
from tierlm.core.book import JobBook
from tierlm.core.budget import Budgets
from tierlm.core.classes import T0, T1, T4
from tierlm.core.device import Decision
from tierlm.core.fairness import FairPool
from tierlm.core.flapping import Flapping
from tierlm.core.floor import PoolFloor
from tierlm.core.holds import SwapHolds
from tierlm.core.jobs import Foreground, Job
from tierlm.core.model_scan import scan_models
from tierlm.core.on_time import DeadlineMode
from tierlm.core.pool_pick import PoolPick
from tierlm.core.preemption import preemption
from tierlm.core.queues import T3_AFTER_POOL, running_candidate
from tierlm.core.slices import SliceClocks
from tierlm.core.stop_reasons import CancelReason
from tierlm.core.wakeups import next_wakeup

__all__ = ["NO_SKIP", "Pick", "StepState", "TieredStep", "free_slot"]

NO_SKIP: frozenset[str] = frozenset()


class Pick(NamedTuple):
    """One pick's answer: the job to run (None: none now), the times at
    which that answer would change with no event, and, with nothing to run,
    the model an idle device goes back to (docs/design.md §4.8 (excursions))."""

    job_id: int | None
    wakes: tuple[float, ...] = ()
    return_to: str | None = None

    def then(self, later: Pick) -> Pick:
        """This pick followed by ``later`` (a second pick of one choice):
        ``later``'s job; both picks' wake-ups; the model to go back to, the
        later one's if it named one."""
        return Pick(later.job_id, self.wakes + later.wakes, later.return_to or self.return_to)


class StepState(Protocol):
    """What a decision reads of the policy (``StepState``) and the
    commands it gives it (``prepare``, ``take``)."""

    foreground: Foreground | None
    loaded_at_pick: str | None
    book: JobBook
    fair: FairPool
    budgets: Budgets
    running: dict[int, Job]
    pool_running: set[int]
    slices: SliceClocks
    flapping: Flapping
    floor: PoolFloor
    holds: SwapHolds
    anticipation: Anticipation
    pool_pick: PoolPick
    affinity: Affinity
    deadlines: DeadlineMode

    def tier(self, job: Job, now: float) -> int: ...
    def rank(self, job: Job, now: float) -> int: ...
    def prepare(self, now: float) -> None: ...
    def over_budget(
        self, now: float, joining: bool = False, floor_owed: bool | None = None
    ) -> frozenset[str]: ...
    def chat_surface_open(self) -> bool: ...
    def nothing_to_run(self, now: float) -> None: ...
    def take(self, job: Job, now: float) -> None: ...


class TieredStep:
    """The tiered policy's answers for one decision (``slots.SlotRules``), and the
    wake-ups and the model to go back to that they met."""

    __slots__ = ("policy", "return_to", "wakes")

    def __init__(self, policy: StepState) -> None:
        self.policy = policy
        self.wakes: list[float] = []
        """When this decision's answers would change by themselves."""
        self.return_to: str | None = None
        """The model an idle device should go back to (docs/design.md §4.8)."""

    def _met(self, pick: Pick) -> int | None:
        self.wakes.extend(pick.wakes)
        if pick.return_to is not None:
            self.return_to = pick.return_to
        return pick.job_id

    def tier(self, job: Job, now: float) -> int:
        return self.policy.tier(job, now)

    def take(self, job: Job, now: float) -> None:
        self.policy.take(job, now)

    def peek(self, now: float, loaded_model: str | None) -> Job | None:
        """The job a free slot would run (left queued; ``take`` starts it)."""
        policy = self.policy
        policy.prepare(now)
        policy.loaded_at_pick = loaded_model
        choice = self._met(select(policy, now, loaded_model, None))
        if choice is None:
            policy.nothing_to_run(now)
            return None
        best = policy.book.jobs[choice]
        if best.task_class.fair and self._held_for_turn(best, now):
            return None
        return best

    def _held_for_turn(self, best: Job, now: float) -> bool:
        return held_for_turn(self.policy, best, now, self.wakes)

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        """docs/design.md §4.6: best = pick(queue + running), and
        whether and how to stop for it (``core/preemption.py``). Because the
        running job takes part in the pick, a preemption that would only lead
        back to it, or to a pointless swap, never happens (§6.6)."""
        policy = self.policy
        if running.task_class.tier == T0:
            return None  # T0 only loses to itself, and it is first in line.
        if not policy.book.jobs:
            return None
        policy.prepare(now)
        run_rank = policy.rank(running, now)
        in_slice = policy.slices.in_slice(running.id, now)
        # The pool's own order (T4) can displace only a pool job past its slice,
        # or overdue work waiting for the floor; anything else yields only to a
        # higher tier, so the hot case (an arrival) skips the EEVDF descent.
        t4 = run_rank == T3_AFTER_POOL or (run_rank == T4 and not in_slice)
        choice = self._met(select(policy, now, loaded_model, (running, run_rank), t4))
        if choice is None or choice == running.id:
            return None
        best = policy.book.jobs[choice]
        best_rank = policy.rank(best, now)
        redo, wake, flapping = policy.slices.evaluations, self.wakes, policy.flapping
        just_left = flapping.just_left(running, now, redo, wake)
        if just_left and best_rank == T1:
            # docs/design.md §4.6 (foreground flapping).
            flapping.cut(running)
            if flapping.owes_resume(running, now, redo, wake):
                return None
        if best_rank <= T1:
            until = policy.deadlines.finish_until(running, best, now)  # §4.8 on time
            if until is not None:
                self.wakes.append(until)
                return None
        return preemption(
            run_rank,
            best_rank,
            best_budgeted=best.task_class.budget is not None,
            person_just_left=just_left,
            requeues_whole=running.task_class.requeue and running.resumable,
            in_slice=in_slice,
        )

    def next_wakeup(self, now: float) -> float | None:
        """When this decision may change with no event (``wakeups``)."""
        policy = self.policy
        policy.book.advance(now)  # deadlines due by now are applied, not reported again
        return _wakeup(policy, now, self.wakes)


def held_for_turn(policy: StepState, best: Job, now: float, wakes: list[float]) -> bool:
    """docs/design.md §4.4 (turns), ``Anticipation.holds_turn``, only
    against the pool's own order: never against a person, a budget or a
    deadline; the hold's end goes to ``wakes``."""
    if not best.task_class.fair:
        return False  # only a fair class ranks T4
    # Both are queries: the hold (seldom one) asked first, the rank only then.
    until = policy.anticipation.holds_turn(best.producer, now, policy.slices.turn_left)
    if until is None or policy.rank(best, now) != T4:
        return False
    wakes.append(until)
    return True


def _wakeup(policy: StepState, now: float, wakes: list[float]) -> float | None:
    """``wakeups.next_wakeup`` of the policy as it stands, the book already
    advanced to ``now``; ``wakes``: what the decision's answers met."""
    book = policy.book
    return next_wakeup(
        now,
        expiries=wakes,
        next_deadline=book.next_deadline(),
        queued=book.fresh + len(book.overdue),
        fresh=book.fresh,
        running=policy.running.values(),
        pool_running=policy.pool_running,
        slices=policy.slices,
        floor=policy.floor,
    )


def free_slot(policy: StepState, now: float, loaded_model: str | None) -> Decision:
    """The plan for a free one-slot device (docs/design.md §2.2, §4.7): the
    common decision, a sequence ended and the next starts. ``slots.plan``'s
    first case over ``TieredStep``'s ``peek``, ``take`` and ``next_wakeup``,
    and ``TieredPolicy._go_back``, in one call: the same answer without a
    step object, a ``Pick`` per choice, nor the book advanced twice (a take
    departs no producer and makes no deadline due: the second was a no-op)."""
    wakes: list[float] = []
    book, floor, running = policy.book, policy.floor, policy.running
    if running:
        policy.prepare(now)
    else:  # ``prepare`` with nothing running: time's effects, the floor's state
        book.advance(now)
        policy.fair.charge(now)
        floor.update(now, book.fresh > 0)
    policy.loaded_at_pick = loaded_model
    budgets = policy.budgets  # ``over_budget(now, joining=True)``, inlined
    if not budgets.any:
        skip = NO_SKIP
    elif floor.active:
        skip = budgets.names
    else:
        skip = budgets.skipped(now, running.values(), True) or NO_SKIP
    choice, back = choose_into(policy, now, loaded_model, skip, None, True, wakes)
    if choice is None and skip and all(job.class_name in skip for job in running.values()):
        # Work-conserving budget (``select``): the pick without it.
        choice, later = choose_into(policy, now, loaded_model, NO_SKIP, None, True, wakes)
        back = later or back
    if choice is None:
        policy.nothing_to_run(now)
    else:
        job = book.jobs[choice]
        if not (job.task_class.fair and held_for_turn(policy, job, now, wakes)):
            policy.take(job, now)
            return Decision((job,), (), _wakeup(policy, now, wakes))
    wake_at = _wakeup(policy, now, wakes)
    if back is not None and back != loaded_model:
        return Decision((), (), wake_at, back)  # docs/design.md §4.8 (excursions)
    return Decision((), (), wake_at)


def select(
    policy: StepState,
    now: float,
    loaded_model: str | None,
    running: tuple[Job, int] | None,
    t4: bool = True,
) -> Pick:
    """The pick within the budgets; if none, and the device would otherwise
    idle for them, the pick without (work-conserving, docs/design.md §6.4).
    ``running``: the running job taking part in the pick, and its rank."""
    extra = running[0] if running is not None else None
    skip = policy.over_budget(now, joining=extra is None)
    pick = choose(policy, now, loaded_model, skip, running, t4)
    if (
        pick.job_id is None
        and skip
        and (extra is not None or all(job.class_name in skip for job in policy.running.values()))
    ):
        # Work-conserving budget (docs/design.md §6.4): the device never
        # idles for it. A free slot beside other classes' sequences may stay
        # free: the device is busy, and each sequence more slows every other
        # one's step (docs/design.md §4.7 (budgets in a batch)).
        pick = pick.then(choose(policy, now, loaded_model, NO_SKIP, running, t4))
    return pick


def choose(
    policy: StepState,
    now: float,
    loaded_model: str | None,
    skip: frozenset[str],
    running: tuple[Job, int] | None,
    t4: bool,
) -> Pick:
    """``choose_into``'s answer as a ``Pick``."""
    wakes: list[float] = []
    job_id, return_to = choose_into(policy, now, loaded_model, skip, running, t4, wakes)
    return Pick(job_id, tuple(wakes), return_to)


def choose_into(
    policy: StepState,
    now: float,
    loaded_model: str | None,
    skip: frozenset[str],
    running: tuple[Job, int] | None,
    t4: bool,
    wakes: list[float],
) -> tuple[int | None, str | None]:
    """The best candidate of each model (``scan_models``), then docs/design.md
    §4.8 (``Affinity.choose``): the job to run (None: none now) and, with
    none, the model an idle device goes back to; the times at which that
    answer would change go to ``wakes``. ``running``: the running job taking
    part (``extra``), and its rank. Without ``t4`` the pool's own order is
    left out (``extra``, in it, stands for it): enough to know whether
    anything outranks ``extra``."""
    in_pool = mine = extra = None
    if running is not None:
        extra, rank = running
        mine = running_candidate(rank, extra, skip)
        if mine is None and extra.task_class.fair and extra.class_name not in skip:
            in_pool = extra  # ranks T4: the pool compares it along its path
            if not t4:
                mine = (T4, (), extra.id)
    book = policy.book
    scan = scan_models(
        now,
        loaded_model,
        skip,
        policy.foreground,
        policy.floor.active,
        t4,
        book,
        policy.pool_pick,
        policy.deadlines,
        extra,
        mine,
        in_pool,
    )
    if scan.presses_at is not None:
        wakes.append(scan.presses_at)  # a swap, a place by a chat
    holds = policy.holds
    chat_open = policy.chat_surface_open()
    best = scan.best
    if best is None:
        if extra is not None:
            return None, None
        # docs/design.md §4.8 (excursions): an excursion that emptied the queue
        # goes back too, or the person's next message met the swap back.
        person = holds.expecting(now, chat_open=chat_open)
        return None, person if person != loaded_model else None
    person = holds.expecting(now, chat_open=chat_open)
    if person is not None:
        # When the person may have stopped typing, the excursion rule ends.
        wakes.append(holds.expected_until(now, chat_open=chat_open))
    best_loaded = scan.best_loaded
    deadlines = policy.deadlines
    held = deadlines.punctual and deadlines.holds_model(loaded_model, policy.running, book.jobs)
    jobs = book.jobs
    best_id = best[2]
    best_job = extra if extra is not None and extra.id == best_id else jobs[best_id]
    loaded_job = None
    if best_loaded is not None:
        loaded_id = best_loaded[2]
        loaded_job = extra if extra is not None and extra.id == loaded_id else jobs[loaded_id]
    choice = policy.affinity.choose(
        AffinityView(now, loaded_model, scan, best_job, loaded_job, person, chat_open, held)
    )
    if choice.affinity_expiry is not None:
        wakes.append(choice.affinity_expiry)
    if choice.hold_expiry is not None:
        wakes.append(choice.hold_expiry)
    return choice.job_id, choice.return_to if extra is None else None
