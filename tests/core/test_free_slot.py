"""The free one-slot device's plan in one call (``tiered_step.free_slot``)
decides as ``slots.plan`` does (docs/design.md §2.2, §4.7, §8).

The steady state of bench/pick_cost.py at a queue of a few thousand jobs
(every class, three models, deadlines past and ahead, a budget filling and
emptying, the foreground on one subject): a policy that plans a free slot in
one call and one that plans it through ``slots.plan`` start the same jobs,
wake at the same times and answer the same preemption checks, step after
step, with both deadline modes.
"""

from __future__ import annotations

import random

import pytest

from tierlm.core import Foreground, Job, SchedulerConfig, TieredPolicy, default_classes
from tierlm.core.device import Device

CLASSES = default_classes()
MODELS = ("m1", "m2", "m3")


def _job(rng: random.Random, job_id: int, now: float) -> Job:
    roll = rng.random()
    name = "chat" if roll < 0.01 else "extract" if roll < 0.4 else "nataraj"
    if roll >= 0.7:
        name = "gana"
    deadline = None
    if name == "gana" and rng.random() < 0.3:
        deadline = now + rng.uniform(-600, 3600)
    return Job(
        id=job_id,
        task_class=CLASSES[name],
        model_id=rng.choice(MODELS),
        producer=f"{name}:{rng.randrange(16)}",
        subject=f"note-{rng.randrange(1000)}" if name == "extract" else None,
        deadline=deadline,
        submitted_at=now,
    )


@pytest.mark.parametrize("deadlines", ["after-people", "on-time"])
def test_the_free_slot_decides_as_the_plan(deadlines: str) -> None:
    config = SchedulerConfig(deadlines=deadlines)
    fused, planned = TieredPolicy(CLASSES, config), TieredPolicy(CLASSES, config)
    planned.fused = False
    policies = (fused, planned)
    rng = random.Random(7)
    now, next_id = 0.0, 1
    jobs: list[Job] = []
    for _ in range(3000):
        job = _job(rng, next_id, now)
        next_id += 1
        jobs.append(job)
    for policy in policies:
        for job in jobs:
            policy.submit(job, now)
        policy.set_foreground(Foreground("extract", "note-7"), now)
    loaded: str | None = "m1"
    for _ in range(600):
        decisions = [policy.decide(now, Device(loaded)) for policy in policies]
        seen = [
            ([j.id for j in d.start], [(j.id, r) for j, r in d.stop], d.wake_at, d.load)
            for d in decisions
        ]
        assert seen[0] == seen[1], now
        if not decisions[0].start:
            now += 1.0
            continue
        job = decisions[0].start[0]
        twin = decisions[1].start[0]
        loaded = job.model_id
        arrival = _job(rng, next_id, now)
        next_id += 1
        for policy in policies:
            policy.submit(arrival, now)
        checks = [
            policy.should_preempt(ran, now + 0.5, loaded)
            for policy, ran in zip(policies, (job, twin), strict=True)
        ]
        assert checks[0] == checks[1], now
        now += 1.0
        for policy, ran in zip(policies, (job, twin), strict=True):
            policy.finished(ran, now)
