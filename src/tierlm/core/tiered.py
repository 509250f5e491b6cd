"""tierlm's policy: tiers, foreground, EDF, budgets, the EEVDF fair pool, affinity.

A pure state machine (docs/design.md §1.1): the shell passes time in and tells it
what happened; it answers what to run and whether to preempt. Every rule cites
docs/design.md §4, the normative statement of what it implements.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from tierlm.core import fair_choice
from tierlm.core.affinity import Affinity
from tierlm.core.anticipation import Anticipation
from tierlm.core.book import JobBook
from tierlm.core.budget import Budgets
from tierlm.core.classes import T0, T1, T2, T3, T4, TaskClass, Tier
from tierlm.core.config import SchedulerConfig
from tierlm.core.device import Decision, Device
from tierlm.core.fairness import FairPool
from tierlm.core.flapping import Flapping
from tierlm.core.floor import PoolFloor
from tierlm.core.guard_relief import GuardRelief
from tierlm.core.holds import SwapHolds
from tierlm.core.jobs import Foreground, Job
from tierlm.core.on_time import deadline_mode
from tierlm.core.order import policy_order
from tierlm.core.persons_in_turn import chat_order
from tierlm.core.pool_pick import PoolPick
from tierlm.core.queues import T3_AFTER_POOL
from tierlm.core.slices import SliceClocks, turn_of
from tierlm.core.slots import plan
from tierlm.core.stop_reasons import CancelReason
from tierlm.core.tiered_step import NO_SKIP, TieredStep, free_slot

__all__ = ["TieredPolicy"]

# Ranks as plain ints for the hot path (IntEnum comparisons cost ~5x more).
# A rank is the effective tier, except that overdue work waiting for the pool
# floor ranks after the pool (docs/design.md §4.5).
_T3_AFTER_POOL = T3_AFTER_POOL
# The tiers ``tier`` answers, as module constants (an enum member's lookup
# costs more than a global's).
_TIER_T0, _TIER_T1, _TIER_T3, _TIER_T4 = Tier.T0, Tier.T1, Tier.T3, Tier.T4


class TieredPolicy:
    """The tiered policy of docs/design.md §4."""

    name = "tierlm"
    fused = True
    """A free one-slot device is planned in one call (``tiered_step.free_slot``);
    False: through ``slots.plan``, as any device (the tests compare both)."""

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
        self.holds.bets.share = config.lost_bets  # docs/design.md §4.8 (bets)
        self.anticipation = Anticipation()  # docs/design.md §4.8 (anticipatory holds)
        self.deadlines = deadline_mode(config, self.holds.swap_estimate)  # docs/design.md §4.8
        self.affinity = Affinity(
            config.max_affinity_wait, self.holds, self.anticipation, self.deadlines
        )
        self.foreground: Foreground | None = None
        self.book = JobBook(self.fair)
        self._jobs = self.book.jobs
        self.budgets = Budgets(self.classes)
        # The jobs holding a slot, in start order (docs/design.md §4.7).
        self.running: dict[int, Job] = {}
        self.slices = SliceClocks(config.slice)  # each one's slice: after its swap
        self.loaded_at_pick: str | None = None
        self.pool_running: set[int] = set()  # those running in the pool's own order
        self.pool_pick = PoolPick(self.fair, self.floor, self._jobs)
        # The surface the person just left, and until when its running
        # evaluation is not cut for the new one (docs/design.md §4.6).
        self.flapping = Flapping(config.slice)
        self.relief = GuardRelief()  # docs/design.md §4.7 (guard relief)

    # -- events ---------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        self.book.advance(now)
        self.book.add(job, now)
        self.anticipation.submitted(job.producer, job.model_id, now)
        self.holds.submitted(job, now)

    def requeue(self, job: Job, now: float) -> None:
        """docs/design.md §4.9: back to the front of its tier (it keeps its
        id); in the pool a return at the same instant keeps its place."""
        self.book.advance(now)
        self.book.add(job, now)
        self.anticipation.returned(job.producer, job.model_id)
        self.slices.end_turn(job.producer)

    def remove(self, job: Job, now: float) -> None:
        self.flapping.removed(job)
        if job.id in self.book.live:
            self.book.remove(job, now, to_run=False)

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        self.book.advance(now)
        was_open = self.chat_surface_open()
        if foreground != self.foreground and self.foreground is not None:
            # docs/design.md §4.6 (foreground flapping): for a slice, the surface
            # the person just left keeps its running evaluation.
            self.flapping.left(self.foreground, now)
        self.foreground = foreground
        chat = self.chat_surface_open()
        self.holds.surface(foreground, now, chat=chat, opened=chat and not was_open)

    def _started(self, job: Job, now: float) -> None:
        self.running[job.id] = job
        self.flapping.started(job, now)
        task_class = job.task_class
        if task_class.tier == T0:
            self.book.turns.served(job.chat_person)  # docs/design.md §4.2
            self.relief.chat_started(job.chat_person)  # docs/design.md §4.7 (guard relief)
        # A job that needs a swap starts its slice when the swap ends (swapped).
        begun = job.model_id == self.loaded_at_pick
        if not begun and task_class.tier > T1 and self.tier(job, now) > T1:
            self.deadlines.swapped_for(job)  # docs/design.md §4.8 (on time)
        fair = task_class.fair
        self.slices.start(job.id, now, begun=begun, turn=job.producer if fair else None)
        self.holds.busy()
        if fair:
            self.fair.start(job, now)
            if self.rank(job, now) == T4:
                self.pool_running.add(job.id)
        self._remix(now)

    def _remix(self, now: float) -> None:
        """The running set changed: the budgets and the floor count each class's
        part of it from now (slot-time, docs/design.md §4.7; with one slot the
        running job's class has all of it)."""
        self.budgets.remix(now, self.running.values())
        if self.running:
            self.floor.start(now, len(self.pool_running) / len(self.running))
        else:
            self.floor.stop(now)

    def finished(self, job: Job, now: float) -> None:
        self.book.advance(now)
        if self.running.pop(job.id, None) is None:
            return
        self.flapping.ended(job)
        self.slices.stop(job.id, now, turn=turn_of(job))
        self.pool_running.discard(job.id)
        if job.task_class.fair:
            # docs/design.md §4.4: "you ran, you pay", cancelled or not, swap included.
            self.fair.stop(job, now)
        self._remix(now)
        if job.task_class.tier == T0:
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
        for job in self.running.values():
            if job.model_id == model_id:
                self.slices.restart(job.id, now)
        self.loaded_at_pick = model_id

    def prepare(self, now: float) -> None:
        """Before a decision: time's effects, the running job's charge so far
        (EEVDF's update_curr), and the floor's state."""
        self.book.advance(now)
        self.fair.charge(now)  # EEVDF's update_curr
        self.floor.update(now, self.book.fresh > 0)
        if not self.running:
            return
        changed = False
        for job in self.running.values():
            if job.task_class.fair:
                pool = self.rank(job, now) == T4
                if pool != (job.id in self.pool_running):  # a loan ran out, or began
                    (self.pool_running.add if pool else self.pool_running.discard)(job.id)
                    changed = True
        if changed:
            self._remix(now)

    # -- tiers and order ------------------------------------------------------

    def tier(self, job: Job, now: float) -> int:
        """docs/design.md §4.1, rules 1 to 5 in order; an overdue
        fair job is T3 only while its loan is open (its producer eligible at
        every level, the pool not owed its floor)."""
        base = job.task_class.tier
        if base == T0:  # compared as plain ints (hot path), answered as tiers
            return _TIER_T0
        foreground = self.foreground
        if foreground is not None and foreground.matches(job):
            return _TIER_T1
        if base != T4:
            return base
        if job.deadline is not None and now >= job.deadline and self._loan_open(job, now):
            return _TIER_T3
        return _TIER_T4

    def _floor_owed(self, now: float) -> bool:
        """The floor's state as a decision at ``now`` finds it (a query: the
        decisions themselves commit it in ``prepare``)."""
        return self.floor.owed(now, self.book.fresh > 0)

    def _loan_open(self, job: Job, now: float) -> bool:
        return not self._floor_owed(now) and self.fair.path_eligible(job)

    def rank(self, job: Job, now: float) -> int:
        tier = int(self.tier(job, now))
        if tier == T3 and not job.task_class.fair and self._floor_owed(now):
            return _T3_AFTER_POOL
        return tier

    # -- decisions ------------------------------------------------------------

    def over_budget(
        self, now: float, joining: bool = False, floor_owed: bool | None = None
    ) -> frozenset[str]:
        """The budgeted classes the picker skips now; ``joining``: for a free
        slot beside running sequences (``Budgets.over``); ``floor_owed``: the
        floor's state if not as the last decision left it (a query's)."""
        if not self.budgets.any:
            return NO_SKIP
        if self.floor.active if floor_owed is None else floor_owed:
            # docs/design.md §4.3: while the backlogged pool is owed its floor,
            # budgeted work waits as overdue work does, within its cap or not
            # (a chat's share would otherwise leave the pool nothing).
            return self.budgets.names
        over = self.budgets.skipped(now, self.running.values(), joining)
        return over if over else NO_SKIP

    def chat_surface_open(self) -> bool:
        foreground = self.foreground
        return foreground is not None and self.classes[foreground.class_name].tier == T0

    def decide(self, now: float, device: Device) -> Decision:
        """docs/design.md §2.2: this step's plan, by the k-slot rules of
        §4.7 (``slots.plan``) over this policy's one-sequence answers, which
        one ``TieredStep`` gathers with what they met (wake-ups, the model
        to go back to)."""
        self.holds.runner_estimate = device.swap_estimate
        self.slices.evaluations = device.evaluations
        if self.fused and device.slots == 1 and not device.running and device.can_start:
            return free_slot(self, now, device.loaded_model)  # the common case, in one call
        step = TieredStep(self)
        relieved = device.slots > 1 and self._guard_relief(now, device, step.wakes)
        decision = plan(
            step,
            now,
            device,
            self.config.chat_slowdown,
            self.book.people_waiting,
            self.deadlines.shielded,
            relieved,
        )
        back = step.return_to
        return decision if back is None else self._go_back(decision, device, back)

    def _guard_relief(self, now: float, device: Device, wakes: list[float]) -> bool:
        """docs/design.md §4.7 (guard relief), ``GuardRelief``; woken for it only
        when it would change the batch: background queued, none running."""
        if device.slots < 2:
            return False  # never on one slot (``GuardRelief.step``)
        tiers = [self.tier(j, now) for j in device.running]
        busy = self.book.chats > 0 or any(t <= T1 for t in tiers)
        gains = len(self.book) > self.book.chats and all(t <= T1 for t in tiers)
        return self.relief.step(now, busy, device.slots, wakes if gains else [])

    @staticmethod
    def _go_back(decision: Decision, device: Device, back: str | None) -> Decision:
        """docs/design.md §4.8 (excursions): an empty device with nothing to
        start goes back to the model a person may type on, with no job."""
        idle = not decision.start and not device.running and device.can_start
        if back is None or not idle or back == device.loaded_model:
            return decision
        return replace(decision, load=back)

    def nothing_to_run(self, now: float) -> None:
        """A free slot found nothing to run: with nothing running, the
        ski-rental clock runs from here if work waits (docs/design.md §4.8)."""
        if not self.running:
            if self._jobs:
                self.holds.idling(now)
            else:
                self.holds.busy()

    def take(self, job: Job, now: float) -> None:
        self.book.remove(job, now, to_run=True)
        self._started(job, now)

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        """docs/design.md §4.6, asked alone (``TieredStep``)."""
        return TieredStep(self).should_preempt(running, now, loaded_model)

    # -- observation ----------------------------------------------------------

    def queued(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)

    def vruntimes(self, now: float) -> dict[str, float]:
        return fair_choice.vruntimes(self.fair)

    def budget_shares(self, now: float) -> dict[str, float]:
        return self.budgets.shares(now)

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """Every queued job in the order ``pick`` would dispatch them, call after
        call, if the device freed now: tiers, each tier's order (the pool's
        turns, each charged one slice: ``pool_order``), affinity and swaps;
        holds and deadlines still ahead are ignored (docs/design.md §2.6). A
        query: the pool floor is read as a decision at ``now`` would find it
        (§4.5), not brought up to now; only decisions move it, so looking
        changes no schedule."""
        skip = self.over_budget(now, floor_owed=self._floor_owed(now))
        return policy_order(
            list(self._jobs.values()),
            now,
            loaded_model,
            rank=lambda job: self.rank(job, now),
            skipped=lambda job, rank: rank >= T2 and job.class_name in skip,
            fair=self.fair,
            max_affinity_wait=self.config.max_affinity_wait,
            chat_order=chat_order(self._jobs.values(), self.book.turns),
        )
