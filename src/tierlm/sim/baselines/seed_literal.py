"""``seed-literal``: the seed's pseudocode, ported line by line.

`seed/inference-scheduler.md` §"Pseudocode" (`InferenceScheduler`): `_tier`,
`_t2BudgetExceeded`, `_pickBest`, `_resolveWithinTier`, `_onJobArrived`,
`setForeground`, `_finishRunning`, newcomer seeding and the 5-minute halving
sweeper. It is what docs/design.md §6 departs from, kept faithful so the departures
show in numbers:

- vruntime per KIND (class), not per producer (§6.1): two Ganas share one
  counter and run first come first served;
- the foreground is a kind only, so opening a note hoists the whole extraction
  backfill to T1 (§6.2), where the budget does not apply;
- `_pickBest` swaps at once when a tier has no job on the loaded model (§6.3);
- the T2 budget counts a job only when it finishes, from samples that leave
  the window whole, and is not work-conserving: with only extraction queued
  and its budget blown, the device idles until the next arrival (§6.4);
- FIFO inside T3 (§6.5);
- preemption only on an arrival of a lower tier than the running job's, or a
  foreground change (§6.6); no timer, so an overdue job waits for the next
  event (§6.7);
- a preempted job restarts from scratch (§6.8; the simulator's jobs do that
  under this policy);
- every pick scans the whole queue, once per tier (§6.9).

Where the pseudocode leaves something out, the choice made here is marked
"(unspecified)". Its literal quirks are kept and marked "(literal)".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

from tierlm.core.classes import DEFAULT_BUDGET_WINDOW, TaskClass
from tierlm.core.jobs import Foreground, Job
from tierlm.core.stop_reasons import CancelReason
from tierlm.sim.baselines.base import OneAtATime, same_model_first

__all__ = ["SeedLiteralPolicy"]

# Seed §"T2 budget": "~60 % of cumulative LLM time over each rolling 5-minute
# window"; §"vruntime decay": "Every 5 minutes a sweeper halves"; §"newcomer":
# "returns after being absent for > 5 min".
SEED_BUDGET_SHARE = 0.60
SEED_WINDOW = DEFAULT_BUDGET_WINDOW
SEED_SWEEP_PERIOD = 300.0
SEED_ABSENCE = 300.0


class SeedLiteralPolicy(OneAtATime):
    """The seed's `InferenceScheduler`, as a :class:`tierlm.core.Policy`."""

    name = "seed-literal"

    def __init__(self, classes: Mapping[str, TaskClass]) -> None:
        self.classes = dict(classes)
        self._q: list[Job] = []  # final List<_Job> _q = [];
        self._vruntime: dict[str, float] = {}  # per LlmTaskKind (= class name)
        # _t2Samples: (at, t2Seconds, totalSeconds), oldest first.
        self._t2_samples: deque[tuple[float, float, float]] = deque()
        self._foreground: str | None = None  # LlmTaskKind? _foreground
        self._running: Job | None = None
        self._picked_at = 0  # where pick took its job from (unpick puts it back)
        self._running_since = 0.0  # Stopwatch _runningTimer
        self._next_sweep: float | None = None
        self._active: dict[str, int] = {}  # queued + running jobs per kind
        self._absent_since: dict[str, float] = {}
        # Events the shell reports before asking should_preempt (the seed
        # decides inside _onJobArrived / setForeground; the shell asks after).
        self._arrived: list[Job] = []
        self._foreground_changed = False
        budgets = [c.budget for c in self.classes.values() if c.budget is not None]
        self._budget_share = budgets[0].share if budgets else SEED_BUDGET_SHARE
        self._budget_window = budgets[0].window if budgets else SEED_WINDOW

    # -- the seed's _tier and _t2BudgetExceeded -------------------------------

    def tier(self, job: Job, now: float) -> int:
        """int _tier(_Job j)."""
        base = int(job.task_class.tier)
        if base == 0:  # j.kind == LlmTaskKind.chat
            return 0
        # `_foreground == j.kind || (j.foregroundHint && _foreground == j.kind)`:
        # the hint changes nothing, the whole kind is hoisted (literal).
        if self._foreground == job.class_name:
            return 1
        if 1 <= base <= 3:  # j.kind == LlmTaskKind.extract (and custom T1-T3 classes)
            return base
        # DateTime.now().isAfter(deadline): strictly after (literal).
        if job.deadline is not None and now > job.deadline:
            return 3
        return 4

    def _t2_budget_exceeded(self, now: float) -> bool:
        self._trim_t2_window(now)
        t2_used = sum(s[1] for s in self._t2_samples)
        total = sum(s[2] for s in self._t2_samples)
        return total > 0 and (t2_used / total) > self._budget_share

    def _trim_t2_window(self, now: float) -> None:
        cutoff = now - self._budget_window
        samples = self._t2_samples
        while samples and samples[0][0] < cutoff:  # first.at.isBefore(cutoff)
            samples.popleft()

    # -- the seed's _pickBest ---------------------------------------------------

    def _pick_best(self, now: float, loaded_model: str | None) -> Job | None:
        self._sweep(now)
        t2_budget_blown = self._t2_budget_exceeded(now)
        for tier in range(5):
            if tier == 2 and t2_budget_blown:
                continue
            in_tier = [j for j in self._q if self.tier(j, now) == tier]
            if not in_tier:
                continue
            # Same-model first.
            same_model = [j for j in in_tier if j.model_id == loaded_model]
            if same_model:
                return self._resolve_within_tier(same_model, tier)
            # Different model — accept the swap.
            return self._resolve_within_tier(in_tier, tier)
        return None

    def _resolve_within_tier(self, jobs: list[Job], tier: int) -> Job:
        if tier == 4:
            # Dart's List.sort is not stable; Python's is: ties keep queue
            # order (unspecified).
            jobs.sort(key=lambda j: self._vruntime.get(j.class_name, 0.0))
        return jobs[0]

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """``_pickBest`` call after call: tier by tier, same model first, T4 by
        the kinds' vruntime now; T2 last while its budget is blown (the seed
        would idle rather than run it)."""
        self._sweep(now)
        tiers: dict[int, list[Job]] = {}
        for job in self._q:
            tiers.setdefault(self.tier(job, now), []).append(job)
        if 4 in tiers:
            tiers[4].sort(key=lambda j: self._vruntime.get(j.class_name, 0.0))
        visit = [0, 1, 3, 4, 2] if self._t2_budget_exceeded(now) else [0, 1, 2, 3, 4]
        return same_model_first([tiers.get(tier, []) for tier in visit], loaded_model)

    # -- events -------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        """run(): `_q.add(job); _onJobArrived(job);` plus newcomer seeding."""
        self._sweep(now)
        kind = job.class_name
        # "When a kind first appears (or returns after being absent for > 5 min),
        # seed it: _vruntime[newKind] = min(_vruntime.values)" -- min over all
        # values, its own old one included (literal).
        absent_since = self._absent_since.get(kind)
        returning = (
            self._active.get(kind, 0) == 0
            and absent_since is not None
            and now - absent_since > SEED_ABSENCE
        )
        if kind not in self._vruntime or returning:
            self._vruntime[kind] = min(self._vruntime.values()) if self._vruntime else 0.0
        self._active[kind] = self._active.get(kind, 0) + 1
        self._q.append(job)
        self._arrived.append(job)

    def requeue(self, job: Job, now: float) -> None:
        """_finishRunning: `_q.add(j); // re-queued from scratch` -- at the END
        of the queue, although the prose says "at the front of its tier" (literal)."""
        self._active[job.class_name] = self._active.get(job.class_name, 0) + 1
        self._q.append(job)

    def remove(self, job: Job, now: float) -> None:
        # The seed has no cancel of a queued job (unspecified): drop it.
        if job in self._q:
            self._q.remove(job)
            self._left(job.class_name, now)

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        """setForeground(LlmTaskKind? kind): a kind, no subject."""
        kind = foreground.class_name if foreground is not None else None
        if kind == self._foreground:
            return
        self._foreground = kind
        self._foreground_changed = True

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        """_pump(): `next = _pickBest(); _q.remove(next)`."""
        job = self._pick_best(now, loaded_model)
        if job is not None:
            self._picked_at = self._q.index(job)
            self._q.remove(job)
        return job

    def unpick(self, job: Job, now: float) -> None:
        self._q.insert(self._picked_at, job)

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        arrived, self._arrived = self._arrived, []
        foreground_changed, self._foreground_changed = self._foreground_changed, False
        running_tier = self.tier(running, now)
        # The seed's `_runningCancel?.cancel()` stops the job at once, whatever
        # it is doing: always a PREEMPT (literal).
        # _onJobArrived: `if (_tier(j) < _tier(_running!)) _runningCancel?.cancel();`
        if any(self.tier(j, now) < running_tier for j in arrived):
            return CancelReason.PREEMPTED
        if foreground_changed:
            best = self._pick_best(now, loaded_model)
            picked_tier = running_tier + 1 if best is None else self.tier(best, now)
            return CancelReason.PREEMPTED if picked_tier < running_tier else None
        return None

    def started(self, job: Job, now: float) -> None:
        self._running = job
        self._running_since = now  # _runningTimer = Stopwatch()..start() (swap included)
        # The seed decides on an arrival while idle by pumping at once; nothing
        # is left to compare against the job that now runs.
        self._arrived.clear()
        self._foreground_changed = False

    def swapped(self, model_id: str, seconds: float, now: float) -> None:
        return None  # the seed swaps at once; it never weighs a swap's cost

    def finished(self, job: Job, now: float) -> None:
        """_finishRunning: charge every kind's vruntime, record the T2 sample."""
        self._sweep(now)
        secs = now - self._running_since
        kind = job.class_name
        self._vruntime[kind] = self._vruntime.get(kind, 0.0) + secs
        # _recordT2Sample(j, secs) (unspecified body): the job's seconds count as
        # T2 when its class has the budget, and always count in the total.
        t2 = secs if job.task_class.budget is not None else 0.0
        self._t2_samples.append((now, t2, secs))
        self._running = None
        self._left(kind, now)

    def _left(self, kind: str, now: float) -> None:
        count = self._active.get(kind, 0) - 1
        if count > 0:
            self._active[kind] = count
        else:
            self._active.pop(kind, None)
            self._absent_since[kind] = now

    def _sweep(self, now: float) -> None:
        """The 5-minute sweeper (`val *= 0.5`). It keeps every order, so applying
        the halvings due before each use gives the same decisions as a timer."""
        if self._next_sweep is None:
            self._next_sweep = now + SEED_SWEEP_PERIOD
            return
        while now >= self._next_sweep:
            for kind in self._vruntime:
                self._vruntime[kind] *= 0.5
            self._next_sweep += SEED_SWEEP_PERIOD

    def next_wakeup(self, now: float) -> float | None:
        # The seed has no timer that re-runs the picker (docs/design.md §6.7).
        return None

    # -- observation --------------------------------------------------------------

    @property
    def foreground(self) -> Foreground | None:
        return Foreground(self._foreground) if self._foreground is not None else None

    def queued(self) -> Iterator[Job]:
        return iter(list(self._q))

    def __len__(self) -> int:
        return len(self._q)

    def vruntimes(self, now: float) -> dict[str, float]:
        self._sweep(now)
        return dict(self._vruntime)

    def budget_shares(self, now: float) -> dict[str, float]:
        self._trim_t2_window(now)
        t2_used = sum(s[1] for s in self._t2_samples)
        total = sum(s[2] for s in self._t2_samples)
        share = t2_used / total if total > 0 else 0.0
        return {name: share for name, c in self.classes.items() if c.budget is not None}
