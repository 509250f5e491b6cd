"""tierlm's policy: tiers, foreground, EDF, budgets, the EEVDF fair pool, affinity.

A pure state machine (docs/design.md §1.1): the shell passes time in and tells it
what happened; it answers what to run and whether to preempt. Every rule cites
docs/design.md §4, the normative statement of what it implements.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from tierlm.core import fair_choice
from tierlm.core.affinity import choose
from tierlm.core.anticipation import Anticipation
from tierlm.core.book import JobBook
from tierlm.core.budget import Budgets
from tierlm.core.classes import T1, T2, T3, T4, TaskClass, Tier
from tierlm.core.config import SchedulerConfig
from tierlm.core.device import Decision, Device
from tierlm.core.fairness import FairPool
from tierlm.core.flapping import Flapping
from tierlm.core.floor import PoolFloor
from tierlm.core.guard_relief import GuardRelief
from tierlm.core.holds import SwapHolds
from tierlm.core.jobs import Foreground, Job
from tierlm.core.model_scan import scan_models
from tierlm.core.on_time import OnTime
from tierlm.core.order import policy_order
from tierlm.core.pool_pick import PoolPick
from tierlm.core.preemption import preemption
from tierlm.core.queues import T3_AFTER_POOL, running_candidate
from tierlm.core.slices import SliceClocks, turn_of
from tierlm.core.slots import plan
from tierlm.core.stop_reasons import CancelReason
from tierlm.core.turns import chat_order
from tierlm.core.wakeups import next_wakeup

__all__ = ["TieredPolicy"]

# Ranks as plain ints for the hot path (IntEnum comparisons cost ~5x more).
# A rank is the effective tier, except that overdue work waiting for the pool
# floor ranks after the pool (docs/design.md §4.5).
_T3_AFTER_POOL = T3_AFTER_POOL


class TieredPolicy:
    """The tiered policy of docs/design.md §4."""

    name = "tierlm"

    def __init__(
        self,
        classes: Mapping[str, TaskClass],
        config: SchedulerConfig | None = None,
    ) -> None:
        self.classes = dict(classes)
        self.config = config = config or SchedulerConfig()
        fair_classes = {n for n, c in self.classes.items() if c.fair}
        unknown = sorted(set(config.class_weights) - fair_classes)
        if unknown:
            raise ValueError(
                f"SchedulerConfig.class_weights: {', '.join(map(repr, unknown))} is not a "
                f"fair-pool class; fair classes: {', '.join(sorted(fair_classes)) or 'none'}"
            )
        self.fair = FairPool(
            slice_seconds=config.slice,
            idle_reset=config.idle_reset,
            class_weights=config.class_weights,
            weights=config.weights,
        )
        self.floor = PoolFloor(config.pool_floor, exit_after=config.slice)
        self.holds = SwapHolds(config.chat_grace, config.chat_idle, config.grace_factor)
        self.anticipation = Anticipation()  # docs/design.md §4.8 (anticipatory holds)
        self._on_time = OnTime.of(config, self.holds.swap_estimate)  # docs/design.md §4.8
        self.foreground: Foreground | None = None
        self._book = JobBook(self.fair)
        self._jobs = self._book.jobs
        self._budgets = Budgets(self.classes)
        # The jobs holding a slot, in start order (docs/design.md §4.7).
        self._running: dict[int, Job] = {}
        self._slices = SliceClocks(config.slice)  # each one's slice: after its swap
        self._loaded_at_pick: str | None = None
        self._pool_running: set[int] = set()  # those running in the pool's own order
        self._pool_pick = PoolPick(self.fair, self.floor, self._jobs)
        # Times at which this decision's answers would change by themselves: set
        # by each choice while ``decide`` runs, read by its ``wake_at``.
        self._wake: list[float] = []
        # The model an idle device should go back to (docs/design.md §4.8 (excursions)), set by the
        # decision under way.
        self._return_to: str | None = None
        # The surface the person just left, and until when its running
        # evaluation is not cut for the new one (docs/design.md §4.6).
        self._flapping = Flapping(config.slice)
        self.relief = GuardRelief()  # docs/design.md §4.7 (guard relief)

    # -- events ---------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        self._book.advance(now)
        self._book.add(job, now)
        self.anticipation.submitted(job.producer, job.model_id, now)
        self.holds.submitted(job, now)

    def requeue(self, job: Job, now: float) -> None:
        """docs/design.md §4.9: back to the front of its tier (it keeps its
        id); in the pool a return at the same instant keeps its place."""
        self._book.advance(now)
        self._book.add(job, now)
        self.anticipation.returned(job.producer, job.model_id)
        self._slices.end_turn(job.producer)

    def remove(self, job: Job, now: float) -> None:
        self._flapping.removed(job)
        if job.id in self._book.live:
            self._book.remove(job, now, to_run=False)

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        self._book.advance(now)
        was_open = self._chat_surface_open()
        if foreground != self.foreground and self.foreground is not None:
            # docs/design.md §4.6 (foreground flapping): for a slice, the surface
            # the person just left keeps its running evaluation.
            self._flapping.left(self.foreground, now)
        self.foreground = foreground
        chat = self._chat_surface_open()
        self.holds.surface(foreground, now, chat=chat, opened=chat and not was_open)

    def _started(self, job: Job, now: float) -> None:
        self._running[job.id] = job
        self._flapping.started(job, now)
        if job.task_class.tier == Tier.T0:
            self._book.turns.served(job.chat_person)  # docs/design.md §4.2
            self.relief.chat_started(job.chat_person)  # docs/design.md §4.7 (guard relief)
        # A job that needs a swap starts its slice when the swap ends (swapped).
        begun = job.model_id == self._loaded_at_pick
        self._slices.start(job.id, now, begun=begun, turn=turn_of(job))
        self.holds.busy()
        if job.task_class.fair:
            self.fair.start(job, now)
            if self._rank(job, now) == T4:
                self._pool_running.add(job.id)
        self._remix(now)

    def _remix(self, now: float) -> None:
        """The running set changed: the budgets and the floor count each class's
        part of it from now (slot-time, docs/design.md §4.7; with one slot the
        running job's class has all of it)."""
        self._budgets.remix(now, self._running.values())
        if self._running:
            self.floor.start(now, len(self._pool_running) / len(self._running))
        else:
            self.floor.stop(now)

    def finished(self, job: Job, now: float) -> None:
        self._book.advance(now)
        if self._running.pop(job.id, None) is None:
            return
        self._flapping.ended(job)
        self._slices.stop(job.id, now, turn=turn_of(job))
        self._pool_running.discard(job.id)
        if job.task_class.fair:
            # docs/design.md §4.4: "you ran, you pay", cancelled or not, swap included.
            self.fair.stop(job, now)
        self._remix(now)
        if job.task_class.tier == Tier.T0:
            self.holds.chat_ended(job.model_id, now)
        else:  # a person's next message is the chat holds' business
            self.anticipation.ended(job.producer, job.model_id, now)

    def swapped(self, model_id: str, seconds: float, now: float) -> None:
        """The shell measured a swap (docs/design.md §4.8 (ski rental)).

        The running job's slice starts after its swap: the swap is charged to
        it ("you ran, you pay") but is not a turn at the device, or every job
        that needs a swap would yield the moment the swap ends, having done
        nothing."""
        self.holds.swapped(model_id, seconds)
        for job in self._running.values():
            if job.model_id == model_id:
                self._slices.restart(job.id, now)
        self._loaded_at_pick = model_id

    def _prepare(self, now: float) -> None:
        """Before a decision: time's effects, the running job's charge so far
        (EEVDF's update_curr), and the floor's state."""
        self._book.advance(now)
        self.fair.charge(now)  # EEVDF's update_curr
        self.floor.update(now, self._book.fresh > 0)
        changed = False
        for job in self._running.values():
            if job.task_class.fair:
                pool = self._rank(job, now) == T4
                if pool != (job.id in self._pool_running):  # a loan ran out, or began
                    (self._pool_running.add if pool else self._pool_running.discard)(job.id)
                    changed = True
        if changed:
            self._remix(now)

    # -- tiers and order ------------------------------------------------------

    def tier(self, job: Job, now: float) -> int:
        """docs/design.md §4.1, rules 1 to 5 in order; an overdue
        fair job is T3 only while its loan is open (its producer eligible at
        every level, the pool not owed its floor)."""
        base = job.task_class.tier
        if base == Tier.T0:
            return Tier.T0
        if self.foreground is not None and self.foreground.matches(job):
            return Tier.T1
        if base != Tier.T4:
            return base
        if job.deadline is not None and now >= job.deadline and self._loan_open(job, now):
            return Tier.T3
        return Tier.T4

    def _floor_owed(self, now: float) -> bool:
        """The floor's state as a decision at ``now`` finds it (a query: the
        decisions themselves commit it in ``_prepare``)."""
        return self.floor.owed(now, self._book.fresh > 0)

    def _loan_open(self, job: Job, now: float) -> bool:
        return not self._floor_owed(now) and self.fair.path_eligible(job)

    def _rank(self, job: Job, now: float) -> int:
        tier = int(self.tier(job, now))
        if tier == T3 and not job.task_class.fair and self._floor_owed(now):
            return _T3_AFTER_POOL
        return tier

    # -- decisions ------------------------------------------------------------

    def _over_budget(self, now: float, joining: bool = False) -> frozenset[str]:
        """The budgeted classes the picker skips now; ``joining``: for a free
        slot beside running sequences (``Budgets.over``)."""
        if self.floor.active:
            # docs/design.md §4.3: while the backlogged pool is owed its floor,
            # budgeted work waits as overdue work does, within its cap or not
            # (a chat's share would otherwise leave the pool nothing).
            return self._budgets.names
        over = self._budgets.over(now, self._running.values(), joining)
        return frozenset(over) if over else _NO_SKIP

    def _choose(
        self,
        now: float,
        loaded_model: str | None,
        skip: frozenset[str],
        extra: Job | None,
        t4: bool,
    ) -> int | None:
        """The best candidate of each model, then docs/design.md §4.8 (``affinity.choose``): the id
        of the job to run, or None.
        Without ``t4`` the pool's own order is left out (``extra``, in it,
        stands for it): enough to know whether anything outranks ``extra``."""
        on_time = self._on_time  # §4.8 (deadlines on time)
        in_pool = mine = None
        if extra is not None:
            mine = running_candidate(self._rank(extra, now), extra, skip)
            if mine is None and extra.task_class.fair and extra.class_name not in skip:
                in_pool = extra  # ranks T4: the pool compares it along its path
                if not t4:
                    mine = (T4, (), extra.id)
        scan = scan_models(
            self._book,
            self._pool_pick,
            lambda job_id: self._job_of(job_id, extra),
            loaded_model=loaded_model,
            skip=skip,
            foreground=self.foreground,
            floor_active=self.floor.active,
            running=extra,
            mine=mine,
            in_pool=in_pool,
            t4=t4,
            on_time=on_time,
            now=now,
        )
        if scan.presses_at is not None:
            self._wake.append(scan.presses_at)  # a swap, or a place beside a chat
        best, best_loaded = scan.best, scan.best_loaded
        if best is None:
            if extra is None:
                # docs/design.md §4.8 (excursions): an excursion that emptied the
                # queue goes back too, or the person's next message met the
                # swap back.
                person = self.holds.expecting(now, chat_open=self._chat_surface_open())
                self._return_to = person if person != loaded_model else None
            return None
        best_job = extra if extra is not None and extra.id == best[2] else self._jobs[best[2]]
        chat_open = self._chat_surface_open()
        person = self.holds.expecting(now, chat_open=chat_open)
        if person is not None:
            # When the person may have stopped typing, the excursion rule ends.
            self._wake.append(self.holds.expected_until(now, chat_open=chat_open))
        choice = choose(
            best,
            best_job,
            best_loaded,
            now=now,
            loaded_model=loaded_model,
            max_affinity_wait=self.config.max_affinity_wait,
            holds=self.holds,
            chat_open=chat_open,
            oldest=scan.oldest,
            anticipation=self.anticipation,
            loaded_job=self._job_of(best_loaded[2], extra) if best_loaded is not None else None,
            person_model=person,
            on_time=on_time,
            overdue=scan.overdue,
            loaded_pressing=scan.loaded_pressing,
        )
        for expiry in (choice.affinity_expiry, choice.hold_expiry):
            if expiry is not None:
                self._wake.append(expiry)
        if choice.return_to is not None and extra is None:
            self._return_to = choice.return_to
        return choice.job_id

    def _job_of(self, job_id: int, extra: Job | None) -> Job:
        """A candidate's job: queued, or ``extra`` (the running one, in the pick)."""
        return extra if extra is not None and extra.id == job_id else self._jobs[job_id]

    def _chat_surface_open(self) -> bool:
        foreground = self.foreground
        return foreground is not None and self.classes[foreground.class_name].tier == Tier.T0

    def _select(
        self, now: float, loaded_model: str | None, extra: Job | None, t4: bool = True
    ) -> int | None:
        skip = self._over_budget(now, joining=extra is None) if self._budgets else _NO_SKIP
        choice = self._choose(now, loaded_model, skip, extra, t4)
        only_skipped = all(job.class_name in skip for job in self._running.values())
        if choice is None and skip and (extra is not None or only_skipped):
            # Work-conserving budget (docs/design.md §6.4): the device never
            # idles for it. A free slot beside other classes' sequences may stay
            # free: the device is busy, and each sequence more slows every other
            # one's step (docs/design.md §4.7 (budgets in a batch)).
            choice = self._choose(now, loaded_model, _NO_SKIP, extra, t4)
        return choice

    def decide(self, now: float, device: Device) -> Decision:
        """docs/design.md §2.2: this step's plan, by the k-slot rules of
        §4.7 (``slots.plan``) over this policy's one-sequence answers."""
        self._wake = []
        self._return_to = None
        self.holds.runner_estimate = device.swap_estimate
        self._slices.evaluations = device.evaluations
        shielded = self._on_time.shielded if self._on_time is not None else None
        waiting = self._book.people_waiting
        relieved = self._guard_relief(now, device)
        decision = plan(self, now, device, self.config.chat_slowdown, waiting, shielded, relieved)
        self._wake = []
        return self._go_back(decision, device)

    def _guard_relief(self, now: float, device: Device) -> bool:
        """docs/design.md §4.7 (guard relief) (``GuardRelief``); woken for it only
        when it would change the batch: background queued, none running."""
        tiers = [self.tier(j, now) for j in device.running]
        busy = self._book.chats > 0 or any(t <= T1 for t in tiers)
        gains = len(self._book) > self._book.chats and all(t <= T1 for t in tiers)
        return self.relief.step(now, busy, device.slots, self._wake if gains else [])

    def _go_back(self, decision: Decision, device: Device) -> Decision:
        """docs/design.md §4.8 (excursions): an empty device with nothing to
        start goes back to the model a person may type on, with no job."""
        back = self._return_to
        idle = not decision.start and not device.running and device.can_start
        if back is None or not idle or back == device.loaded_model:
            return decision
        return replace(decision, load=back)

    def peek(self, now: float, loaded_model: str | None) -> Job | None:
        """The job a free slot would run (left queued; ``take`` starts it)."""
        self._prepare(now)
        self._loaded_at_pick = loaded_model
        choice = self._select(now, loaded_model, None)
        if choice is None:
            if not self._running:
                if self._jobs:
                    self.holds.idling(now)  # the ski-rental clock runs from here
                else:
                    self.holds.busy()
            return None
        best = self._jobs[choice]
        if self._held_for_turn(best, now):
            return None
        return best

    def _held_for_turn(self, best: Job, now: float) -> bool:
        """docs/design.md §4.4 (turns) (``Anticipation.holds_turn``), only
        against the pool's own order: never against a person, a budget or a
        deadline."""
        if self._rank(best, now) != T4:
            return False
        until = self.anticipation.holds_turn(best.producer, now, self._slices.turn_left)
        if until is not None:
            self._wake.append(until)
        return until is not None

    def take(self, job: Job, now: float) -> None:
        self._book.remove(job, now, to_run=True)
        self._started(job, now)

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        """docs/design.md §4.6: best = pick(queue + running), and
        whether and how to stop for it (``core/preemption.py``). Because the
        running job takes part in the pick, a preemption that would only lead
        back to it, or to a pointless swap, never happens (§6.6)."""
        if running.task_class.tier == Tier.T0:
            return None  # T0 only loses to itself, and it is first in line.
        if not self._jobs:
            return None
        self._prepare(now)
        run_rank = self._rank(running, now)
        in_slice = self._slices.in_slice(running.id, now)
        # The pool's own order (T4) can displace only a pool job past its slice,
        # or overdue work waiting for the floor; anything else yields only to a
        # higher tier, so the hot case (an arrival) skips the EEVDF descent.
        t4 = run_rank == _T3_AFTER_POOL or (run_rank == T4 and not in_slice)
        choice = self._select(now, loaded_model, running, t4)
        if choice is None or choice == running.id:
            return None
        best = self._jobs[choice]
        best_rank = self._rank(best, now)
        redo, wake = self._slices.evaluations, self._wake
        just_left = self._flapping.just_left(running, now, redo, wake)
        if just_left and best_rank == Tier.T1:
            # docs/design.md §4.6 (foreground flapping).
            self._flapping.cut(running)
            if self._flapping.owes_resume(running, now, redo, wake):
                return None
        if self._on_time is not None and best_rank <= T1:
            until = self._on_time.finish_until(running, best, now)
            if until is not None:
                self._wake.append(until)
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
        """When the last decision may change with no event (``wakeups``)."""
        self._book.advance(now)  # deadlines due by now are applied, not reported again
        return next_wakeup(
            now,
            expiries=self._wake,
            next_deadline=self._book.next_deadline(),
            queued=self._book.fresh + len(self._book.overdue),
            fresh=self._book.fresh,
            running=self._running.values(),
            pool_running=self._pool_running,
            slices=self._slices,
            floor=self.floor,
        )

    # -- observation ----------------------------------------------------------

    def queued(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)

    def vruntimes(self, now: float) -> dict[str, float]:
        return fair_choice.vruntimes(self.fair)

    def budget_shares(self, now: float) -> dict[str, float]:
        return self._budgets.shares(now)

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """Every queued job in the order ``pick`` would dispatch them, call after
        call, if the device freed now: tiers, each tier's order (the pool's
        turns, each charged one slice: ``pool_order``), affinity and swaps;
        holds and deadlines still ahead are ignored (docs/design.md §2.6). It changes nothing but
        the pool floor's state, brought up
        to now as a decision would (§4.3), so positions tell the next one."""
        self.floor.update(now, self._book.fresh > 0)
        skip = self._over_budget(now) if self._budgets else _NO_SKIP
        return policy_order(
            list(self._jobs.values()),
            now,
            loaded_model,
            rank=lambda job: self._rank(job, now),
            skipped=lambda job, rank: rank >= T2 and job.class_name in skip,
            fair=self.fair,
            max_affinity_wait=self.config.max_affinity_wait,
            chat_order=chat_order(self._jobs.values(), self._book.turns),
        )


_NO_SKIP: frozenset[str] = frozenset()
