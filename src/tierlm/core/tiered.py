"""tierlm's policy: tiers, foreground, EDF, budgets, CFS fair pool, affinity.

A pure state machine (docs/design.md §1 core): the shell passes time in and tells it
what happened; it answers what to run and whether to preempt. Every rule cites
docs/design.md §4, the normative statement of what it implements.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping

from tierlm.core.budget import BudgetMeter
from tierlm.core.classes import TaskClass, Tier
from tierlm.core.config import SchedulerConfig
from tierlm.core.fairness import FairPool
from tierlm.core.jobs import Foreground, Job
from tierlm.core.queues import ClassQueue, Live, ModelQueue

__all__ = ["TieredPolicy"]

# (tier, order key, job id): the smaller, the sooner. Keys are compared only
# within one tier: (id,) for FIFO tiers, (deadline, id) for T3, (vruntime, id) T4.
_Candidate = tuple[int, tuple[float, ...], int]

# Tier values as plain ints for the hot path (IntEnum comparisons cost ~5x more).
_T0, _T1, _T2, _T3, _T4 = (int(t) for t in Tier)


class TieredPolicy:
    """The tiered policy of docs/design.md §4."""

    name = "tierlm"

    def __init__(
        self,
        classes: Mapping[str, TaskClass],
        config: SchedulerConfig | None = None,
    ) -> None:
        self.classes = dict(classes)
        self.config = config or SchedulerConfig()
        self.fair = FairPool(
            decay_period=self.config.decay_period,
            idle_reset=self.config.idle_reset,
            weights=self.config.weights,
        )
        self.foreground: Foreground | None = None
        self._jobs: dict[int, Job] = {}
        self._live: Live = {}
        self._version = 0
        self._models: dict[str, ModelQueue] = {}
        # T4 jobs whose deadline is still ahead: (deadline, id, version).
        self._pending_deadlines: list[tuple[float, int, int]] = []
        self._meters: dict[str, BudgetMeter] = {
            name: BudgetMeter(c.budget.window) for name, c in self.classes.items() if c.budget
        }
        self._fg_version = 0
        self._caps = {n: c.budget.share for n, c in self.classes.items() if c.budget}
        self._running: Job | None = None
        self._running_since = 0.0
        self._last_chat_end: dict[str, float] = {}
        # Times at which the last decision would change by itself (next_wakeup).
        self._affinity_expiry: float | None = None
        self._grace_expiry: float | None = None

    # -- events ---------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        self._advance(now)
        if job.task_class.fair:
            self.fair.job_arrived(job.producer, now)
        self._enqueue(job, now)

    def requeue(self, job: Job, now: float) -> None:
        """docs/design.md §4 re-queue: back to the front of its tier (it keeps its id)."""
        self._advance(now)
        if job.task_class.fair:
            self.fair.job_arrived(job.producer, now, requeued=True)
        self._enqueue(job, now)

    def remove(self, job: Job, now: float) -> None:
        if job.id not in self._live:
            return
        self._dequeue(job)
        if job.task_class.fair:
            self.fair.job_left(job.producer, now)

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        self._advance(now)
        self.foreground = foreground
        self._fg_version += 1

    def started(self, job: Job, now: float) -> None:
        self._running = job
        self._running_since = now
        for name, meter in self._meters.items():
            meter.start(now, job.class_name == name)

    def finished(self, job: Job, now: float) -> None:
        self._advance(now)
        for meter in self._meters.values():
            meter.stop(now)
        if job.task_class.fair:
            # docs/design.md §4 fair pool: "you ran, you pay", cancelled or not, swap included.
            self.fair.charge(job.producer, now - self._running_since)
            self._producer_worsened(job.producer)
            self.fair.job_left(job.producer, now)
        if job.task_class.tier == Tier.T0:
            self._last_chat_end[job.model_id] = now
        self._running = None

    # -- queue bookkeeping ----------------------------------------------------

    def _enqueue(self, job: Job, now: float) -> None:
        self._version += 1
        version = self._version
        self._jobs[job.id] = job
        self._live[job.id] = version
        model = self._models.get(job.model_id)
        if model is None:
            model = self._models[job.model_id] = ModelQueue(self._live)
        queue = model.queue_for(job.task_class)
        queue.add(job, version, self.fair.get(job.producer))
        model.count += 1
        if job.task_class.tier == Tier.T4 and job.deadline is not None:
            if job.deadline <= now:
                queue.mark_overdue(job, version)
            else:
                heapq.heappush(self._pending_deadlines, (job.deadline, job.id, version))

    def _dequeue(self, job: Job) -> None:
        del self._live[job.id]
        del self._jobs[job.id]
        model = self._models[job.model_id]
        model.by_class[job.class_name].removed(job)
        model.count -= 1
        if model.count == 0:
            del self._models[job.model_id]

    def _advance(self, now: float) -> None:
        """Apply what time alone changed: decay, deadlines that passed."""
        self.fair.advance(now)
        pending = self._pending_deadlines
        while pending and pending[0][0] <= now:
            _deadline, job_id, version = heapq.heappop(pending)
            if self._live.get(job_id) == version:
                job = self._jobs[job_id]
                model = self._models[job.model_id]
                model.by_class[job.class_name].mark_overdue(job, version)

    # -- tiers and order ------------------------------------------------------

    def tier(self, job: Job, now: float) -> int:
        """docs/design.md §4 effective tier, rules 1 to 5 in order."""
        base = job.task_class.tier
        if base == Tier.T0:
            return Tier.T0
        if self.foreground is not None and self.foreground.matches(job):
            return Tier.T1
        if base != Tier.T4:
            return base
        if job.deadline is not None and now >= job.deadline:
            return Tier.T3
        return Tier.T4

    def _candidate(self, job: Job, now: float, skip: frozenset[str]) -> _Candidate | None:
        """The order key of one job (the running one, docs/design.md §4 preemption)."""
        tier = self.tier(job, now)
        if tier >= Tier.T2 and job.class_name in skip:
            return None
        if tier == Tier.T3:
            deadline = job.deadline if job.deadline is not None else math.inf
            return (tier, (deadline, job.id), job.id)
        if tier == Tier.T4:
            return (tier, (self.fair.get(job.producer), job.id), job.id)
        return (tier, (job.id,), job.id)

    def _producer_worsened(self, producer: str) -> None:
        """A charge raised ``producer``'s vruntime: only a cached candidate that
        is its own T4 job can change (vruntime only grows between decays, so
        nobody else's key improves)."""
        jobs = self._jobs
        for model in self._models.values():
            for queue in model.by_class.values():
                cached = queue.cached
                if (
                    queue.cache_ok
                    and cached is not None
                    and cached[0] == _T4
                    and jobs[cached[2]].producer == producer
                ):
                    queue.cache_ok = False

    def _best_in(self, model: ModelQueue, skip: frozenset[str]) -> _Candidate | None:
        """The best queued job of one model: lowest tier, then the tier's order.

        Hot path (every pick, every preemption check): plain ints, not Tier.
        """
        best: _Candidate | None = None
        foreground = self.foreground
        fg_class = foreground.class_name if foreground is not None else None
        for queue in model.by_class.values():
            if queue.count == 0:
                continue
            base = queue.base
            candidate: _Candidate | None = None
            if base == _T0:
                oldest = queue.oldest()
                if oldest is not None:
                    candidate = (_T0, (oldest,), oldest)
            else:
                name = queue.name
                if name == fg_class:
                    assert foreground is not None
                    # Rule 2: the foreground's jobs are T1 whatever their budget
                    # (a person is looking at them). If any match, the class's
                    # other jobs (lower tiers) cannot beat them.
                    if foreground.subject is None:
                        oldest = queue.oldest()
                    else:
                        oldest = queue.oldest_with_subject(foreground.subject)
                    if oldest is not None:
                        candidate = (_T1, (oldest,), oldest)
                if candidate is None and name not in skip:
                    candidate = self._base_candidate(queue, base)
            if candidate is not None and (best is None or candidate < best):
                best = candidate
        return best

    def _base_candidate(self, queue: ClassQueue, base: int) -> _Candidate | None:
        """A class's best job at its own tier (rules 3 to 5), cached per class:
        one event changes one class queue, so a decision recomputes one or two
        candidates, not every (model, class) pair."""
        epoch = self.fair.epoch
        if queue.cache_ok and queue.cache_epoch == epoch:
            return queue.cached
        candidate = self._compute_base_candidate(queue, base)
        queue.cached, queue.cache_ok, queue.cache_epoch = candidate, True, epoch
        return candidate

    def _compute_base_candidate(self, queue: ClassQueue, base: int) -> _Candidate | None:
        if base <= _T2:
            oldest = queue.oldest()
            return (base, (oldest,), oldest) if oldest is not None else None
        # T3 classes hold every job in `deadlines`; T4 classes only the overdue.
        earliest = queue.earliest_deadline()
        if earliest is not None:
            deadline, job_id = earliest
            return (_T3, (deadline, job_id), job_id)
        if base == _T4:
            fairest = queue.fairest(self.fair.get, self.fair.epoch)
            if fairest is not None:
                vruntime, job_id = fairest
                return (_T4, (vruntime, job_id), job_id)
        return None

    # -- decisions ------------------------------------------------------------

    def _over_budget(self, now: float) -> frozenset[str]:
        over = [name for name, meter in self._meters.items() if meter.share(now) > self._caps[name]]
        return frozenset(over) if over else _NO_SKIP

    def _choose(
        self, now: float, loaded_model: str | None, skip: frozenset[str], extra: Job | None
    ) -> int | None:
        """docs/design.md §4 affinity and swaps: the id of the job to run, or None."""
        best: _Candidate | None = None
        best_loaded: _Candidate | None = None
        for model_id, model in self._models.items():
            candidate = self._best_in(model, skip)
            if candidate is None:
                continue
            if best is None or candidate < best:
                best = candidate
            if model_id == loaded_model:
                best_loaded = candidate
        if extra is not None:
            candidate = self._candidate(extra, now, skip)
            if candidate is not None:
                if best is None or candidate < best:
                    best = candidate
                if extra.model_id == loaded_model and (
                    best_loaded is None or candidate < best_loaded
                ):
                    best_loaded = candidate
        if best is None:
            return None
        tier, _key, best_id = best
        best_job = extra if extra is not None and extra.id == best_id else self._jobs[best_id]
        # B's model is loaded (or none is): run B.
        if loaded_model is None or best_job.model_id == loaded_model:
            return best_id
        # B is T0 or T1: a person is waiting; swap.
        if tier <= Tier.T1:
            return best_id
        # Same-model work first, falling through tiers, unless B starves.
        starve_at = best_job.submitted_at + self.config.max_affinity_wait
        if best_loaded is not None and now < starve_at:
            self._affinity_expiry = _earliest(self._affinity_expiry, starve_at)
            return best_loaded[2]
        # Swap to B, but not within chat_grace of the last chat on the loaded
        # model, nor while the chat surface is open (the foreground is a T0
        # class): a person likely types again, and a swap cannot be interrupted,
        # so their next message would wait for it and for the swap back.
        last_chat = self._last_chat_end.get(loaded_model)
        if last_chat is not None:
            if self._chat_surface_open():
                return best_loaded[2] if best_loaded is not None else None
            if now < last_chat + self.config.chat_grace:
                grace_end = last_chat + self.config.chat_grace
                self._grace_expiry = _earliest(self._grace_expiry, grace_end)
                return best_loaded[2] if best_loaded is not None else None
        return best_id

    def _chat_surface_open(self) -> bool:
        foreground = self.foreground
        return foreground is not None and self.classes[foreground.class_name].tier == Tier.T0

    def _select(self, now: float, loaded_model: str | None, extra: Job | None) -> int | None:
        self._advance(now)
        self._affinity_expiry = self._grace_expiry = None
        skip = self._over_budget(now) if self._meters else _NO_SKIP
        choice = self._choose(now, loaded_model, skip, extra)
        if choice is None and skip:
            # Work-conserving budget (docs/design.md §6.4): the device never idles for it.
            choice = self._choose(now, loaded_model, _NO_SKIP, extra)
        return choice

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        choice = self._select(now, loaded_model, None)
        if choice is None:
            return None
        job = self._jobs[choice]
        self._dequeue(job)
        return job

    def should_preempt(self, running: Job, now: float, loaded_model: str | None) -> bool:
        """docs/design.md §4 preemption: best = pick(queue + running); stop if it ranks higher.

        Because the running job takes part in the pick, a preemption that would
        only lead back to it, or to a pointless swap, never happens (§6.6).
        """
        if running.task_class.tier == Tier.T0:
            return False  # T0 only loses to itself, and it is first in line.
        if not self._jobs:
            return False
        choice = self._select(now, loaded_model, running)
        if choice is None or choice == running.id:
            return False
        best = self._jobs[choice]
        best_tier = self.tier(best, now)
        # Budgeted work at its own tier waits for the device instead of
        # preempting: otherwise each time its share dips under the cap it would
        # cut a fair-pool job short, wasting that work and starving the pool.
        # (docs/design.md §4 budget.)
        if best_tier >= Tier.T2 and best.task_class.budget is not None:
            return False
        return best_tier < self.tier(running, now)

    def next_wakeup(self, now: float) -> float | None:
        """When the last decision may change with no event.

        A T4 job's deadline (it becomes T3 and may preempt), the end of a chat
        grace period, a best job reaching ``max_affinity_wait``. Not the budget
        window: a budget never idles the device and never preempts, so its edge
        changes nothing until the next dispatch. Not the vruntime decay: halving
        keeps every order (applied lazily).
        """
        self._advance(now)  # deadlines due by now are applied, not reported again
        times: list[float] = []
        pending = self._pending_deadlines
        while pending and self._live.get(pending[0][1]) != pending[0][2]:
            heapq.heappop(pending)
        if pending:
            times.append(pending[0][0])
        for expiry in (self._affinity_expiry, self._grace_expiry):
            if expiry is not None and expiry > now:
                times.append(expiry)
        return min(times) if times else None

    # -- observation ----------------------------------------------------------

    def queued(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)

    def vruntimes(self, now: float) -> dict[str, float]:
        self.fair.advance(now)
        return dict(self.fair.vruntime)

    def budget_shares(self, now: float) -> dict[str, float]:
        return {name: meter.share(now) for name, meter in self._meters.items()}

    # -- the real queue order (a query) ----------------------------------------
    # ONE self-contained method on purpose: it reads only `tier`/`_candidate`,
    # the queued jobs, the budget meters and the config, so the fair pool's
    # rewrite can replace its body without touching anything else.

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """Policy.queue_order: the queued jobs in the order ``pick`` would give them.

        Each job ranks by ``_candidate`` (tier, then the tier's order: submit
        order in T0-T2, EDF in T3, vruntime in T4); then affinity replays
        ``_choose`` (docs/design.md §4 affinity and swaps): after each job the
        device holds its model; the best job runs if it is on that model or is
        T0/T1, else the best job on that model runs first, unless the best job
        has already waited past ``max_affinity_wait``. Classes over their
        budget now go last (work-conserving, §6.4). Not modelled, as the
        protocol says: the chat grace and the open chat surface (they delay a
        swap, they do not reorder), deadlines and starvation bounds still
        ahead, vruntime charged as jobs run. O(n log n).
        """
        skip = self._over_budget(now) if self._meters else _NO_SKIP
        ranked: list[tuple[bool, _Candidate, Job]] = []
        for job in self._jobs.values():
            candidate = self._candidate(job, now, skip)
            over_budget = candidate is None
            if candidate is None:
                candidate = self._candidate(job, now, _NO_SKIP)
                assert candidate is not None
            ranked.append((over_budget, candidate, job))
        ranked.sort(key=lambda item: (item[0], item[1]))
        jobs = [job for _over, _candidate, job in ranked]
        # The budget's two passes: jobs over budget run only once all others did.
        split = next((i for i, item in enumerate(ranked) if item[0]), len(jobs))
        by_model: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            by_model.setdefault(job.model_id, []).append(i)
        heads = dict.fromkeys(by_model, 0)  # next untaken index per model
        taken = [False] * len(jobs)
        order: list[Job] = []
        best = 0
        model = loaded_model
        while len(order) < len(jobs):
            while taken[best]:
                best += 1
            choice = best
            best_job = jobs[best]
            if (
                model is not None
                and best_job.model_id != model
                and ranked[best][1][0] > Tier.T1
                and now < best_job.submitted_at + self.config.max_affinity_wait
            ):
                same = by_model.get(model, [])
                head = heads.get(model, 0)
                while head < len(same) and taken[same[head]]:
                    head += 1
                heads[model] = head
                if head < len(same) and (best >= split or same[head] < split):
                    choice = same[head]
            taken[choice] = True
            order.append(jobs[choice])
            model = jobs[choice].model_id
        return order


_NO_SKIP: frozenset[str] = frozenset()


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
