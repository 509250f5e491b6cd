"""The decision's caches change no decision (docs/design.md §1.1, §8).

A pick keeps what a step did not change: a model's last two best queued
jobs until its queue changes (``ModelQueue.best``, compared inline by
``scan_models``), the pool's best per model, with the EEVDF pick and
without, until the pool changes (``PoolPick``), a meter's usage for its
instant, a span starting at that instant included (``BudgetMeter.usage``,
``BudgetMeter.start``), the leaf of the job just dequeued to run for its
start (``FairPool.start``), and it skips the deadline mode's questions when
nothing ever presses (``DeadlineMode.punctual``). A free one-slot device is
planned in one call (``tiered_step.free_slot``, ``TieredPolicy.fused``).
Over random event sequences (submits of every class on three models,
deadlines past and ahead, decisions on 1 and 3 slots, preemption checks,
ends, re-queues, removals, foreground changes; both deadline modes), a
policy whose caches are emptied before every call, and whose free slot is
planned through ``slots.plan``, answers exactly as the policy that keeps
them and plans it in one call.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlm.core import Foreground, Job, SchedulerConfig, TieredPolicy, default_classes
from tierlm.core.device import Decision, Device

CLASSES = default_classes()
MODELS = ["m1", "m2", "m3"]
PRODUCERS = ["a", "b", "swarm/1", "swarm/2", "c/x"]

submit = st.tuples(
    st.just("submit"),
    st.sampled_from(sorted(CLASSES)),
    st.sampled_from(MODELS),
    st.sampled_from(PRODUCERS),
    st.none() | st.floats(min_value=-30, max_value=60),
)
decide = st.tuples(st.just("decide"), st.sampled_from([*MODELS, None]))
event = st.one_of(  # submits and decisions weighted up: a queue builds, and runs
    submit,
    submit,
    submit,
    decide,
    decide,
    decide,
    st.tuples(st.just("preempt"), st.integers(0, 7)),
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("requeue"), st.integers(0, 7)),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(
        st.just("foreground"),
        st.none() | st.tuples(st.sampled_from(["chat", "extract", "gana"]), st.none()),
    ),
)


def _uncached(policy: TieredPolicy) -> None:
    """Empty every cache a decision keeps (the module doc)."""
    policy.pool_pick.clear()
    for queue in policy.book.models.values():
        queue.changed()
        for by_class in queue.by_class.values():
            by_class.cache_ok = False
    for meter in (*policy.budgets._meters.values(), policy.floor.meter):
        meter._usage = None
    fair = policy.fair
    start = fair.start

    def start_afresh(job: Job, now: float) -> None:
        fair._to_run = None  # the leaf found again, by name
        start(job, now)

    fair.start = start_afresh  # type: ignore[method-assign]


def _seen(decision: Decision) -> tuple[Any, ...]:
    return (
        tuple(job.id for job in decision.start),
        tuple((job.id, reason) for job, reason in decision.stop),
        decision.wake_at,
        decision.load,
    )


class _Run:
    """One policy driven through the events, as the shell would."""

    def __init__(self, config: SchedulerConfig, cached: bool) -> None:
        self.policy = TieredPolicy(CLASSES, config)
        self.cached = cached
        self.running: list[Job] = []
        self.loaded: str | None = None
        if not cached:
            self.policy.fused = False  # a free slot planned by ``slots.plan``
            _uncached(self.policy)

    def ask(self) -> None:
        if not self.cached:
            _uncached(self.policy)

    def end(self, job: Job, now: float, requeue: bool) -> None:
        self.running.remove(job)
        self.policy.finished(job, now)
        if requeue and job.task_class.requeue:
            self.policy.requeue(job, now)

    def step(self, ev: tuple[Any, ...], now: float, slots: int, next_id: int) -> Any:
        policy, kind = self.policy, ev[0]
        if kind == "submit":
            _, name, model, producer, deadline = ev
            job = Job(
                id=next_id,
                task_class=CLASSES[name],
                model_id=model,
                producer=f"{name}:{producer}",
                subject=None,
                deadline=None if deadline is None else now + deadline,
                submitted_at=now,
            )
            policy.submit(job, now)
            return None
        if kind == "decide":
            if not self.running and ev[1] is not None:
                self.loaded = ev[1]
            self.ask()
            device = Device(self.loaded, slots=slots, running=tuple(self.running))
            decision = policy.decide(now, device)
            for job, reason in decision.stop:
                self.end(job, now, requeue=reason.preempts)
            for job in decision.start:
                self.running.append(job)
                self.loaded = job.model_id
            if decision.load is not None:
                self.loaded = decision.load
            return _seen(decision)
        if kind == "foreground":
            policy.set_foreground(None if ev[1] is None else Foreground(*ev[1]), now)
            return None
        if kind == "remove":
            queued = list(policy.queued())
            if queued:
                policy.remove(queued[ev[1] % len(queued)], now)
            return None
        if not self.running:
            return None
        job = self.running[ev[1] % len(self.running)]
        if kind == "preempt":
            self.ask()
            return policy.should_preempt(job, now, self.loaded)
        self.end(job, now, requeue=kind == "requeue")
        return None


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(
        st.tuples(event, st.floats(min_value=0, max_value=4)), min_size=20, max_size=80
    ),
    slots=st.sampled_from([1, 3]),
    on_time=st.booleans(),
)
def test_a_cached_pick_equals_an_uncached_one(
    events: list[tuple[tuple[Any, ...], float]], slots: int, on_time: bool
) -> None:
    config = SchedulerConfig(deadlines="on-time" if on_time else "after-people")
    cached, uncached = _Run(config, cached=True), _Run(config, cached=False)
    now = 0.0
    for next_id, (ev, advance) in enumerate(events, start=1):
        now += advance
        answers = [run.step(ev, now, slots, next_id) for run in (cached, uncached)]
        assert answers[0] == answers[1], (ev, now)
        assert [j.id for j in cached.running] == [j.id for j in uncached.running]
