"""The real queue order (``Policy.queue_order``, ``Scheduler.queue_positions``):
positions are the order in which the jobs then really run (docs/design.md §2.6, §4), in virtual
time."""

from __future__ import annotations

import asyncio

from tests.helpers import Recorder, mixed_queue, runner, work_for
from tierlm import Scheduler, SchedulerConfig


async def test_positions_are_the_real_dispatch_order_at_every_tier() -> None:
    # Chats, the opened card and extraction take most of the device, so the
    # pool floor (docs/design.md §4.5) would close the
    # overdue rounds' loans halfway through: it is left out of this queue.
    config = SchedulerConfig(pool_floor=0.0)

    async with Scheduler(runner("m1"), config=config) as sched:
        handles = await mixed_queue(sched)
        positions = dict(sched.queue_positions())
        snap = sched.snapshot()
        rec = Recorder.attach(sched)
        sched.resume()
        await asyncio.gather(*handles)

    predicted = sorted(positions, key=lambda job_id: positions[job_id][1])
    started = list(dict.fromkeys(rec.order()))  # first starts
    by_id = {h.id: h for h in handles}
    assert sorted(p for _tier, p in positions.values()) == list(range(1, len(handles) + 1))
    # Position 1 ran first; the device went from model to model as
    # predicted (affinity: same-model work first, then one swap per batch).
    assert started[0] == predicted[0]
    assert [by_id[i].model_id for i in started] == [by_id[i].model_id for i in predicted]
    # Outside the pool (whose turns depend on what running its jobs
    # charges: tests/core/test_queue_order_core.py), the order is exact.
    apart = {i for i in predicted if not by_id[i].job.task_class.fair}
    assert [i for i in started if i in apart] == [i for i in predicted if i in apart]
    tiers = {by_id[i].class_name + by_id[i].model_id: t for i, (t, _p) in positions.items()}
    assert tiers["chatm1"] == tiers["chatm2"] == 0
    assert tiers["nataraj" + "m2"] == 1 and tiers["nataraj" + "m1"] == 4
    assert tiers["extractm1"] == tiers["extractm2"] == 2
    # Affinity: the order is not the tiers' order (same-model work first).
    assert [positions[i][0] for i in predicted] != sorted(t for t, _p in positions.values())
    # The snapshot lists each tier in the same order, with the same positions.
    for tier, infos in snap.queued.items():
        assert [info.id for info in infos] == [i for i in predicted if positions[i][0] == tier]
        assert all(info.position == positions[info.id][1] for info in infos)


async def test_pool_positions_take_turns_and_are_exact_for_one_slice_jobs() -> None:
    """Backlogged producers on one model, one with twice the weight and two
    sharing a path: each job runs one slice, and the jobs start exactly in the
    predicted order, the producers taking turns (not one producer's whole
    queue after another's: a job's position must not jump back each time its
    producer runs)."""
    config = SchedulerConfig(weights={"heavy": 2.0})
    producers = ["heavy", "light", "team/a", "team/b"]

    async with Scheduler(runner("m1"), config=config) as sched:
        await sched.pause()
        handles = [
            sched.submit("gana", "m1", work_for(config.slice), producer=producer)
            for _round in range(4)
            for producer in producers
        ]
        positions = dict(sched.queue_positions())
        rec = Recorder.attach(sched)
        sched.resume()
        await asyncio.gather(*handles)

    predicted = sorted(positions, key=lambda job_id: positions[job_id][1])
    assert rec.order() == predicted
    producer_of = {h.id: h.producer for h in handles}
    first_eight = [producer_of[i] for i in predicted[:8]]
    # Weights 2 : 1 : (1/2 + 1/2): the heavy producer has twice the turns.
    assert first_eight.count("heavy") == 4 and first_eight.count("light") == 2
    assert first_eight.count("team/a") + first_eight.count("team/b") == 2
    # Turns, not one producer's queue after another's: all three shares
    # have a job among the first five.
    assert {p.split("/")[0] for p in first_eight[:5]} == {"heavy", "light", "team"}


async def test_positions_are_cached_until_the_next_event() -> None:
    async with Scheduler(runner("m1")) as sched:
        handles = await mixed_queue(sched)
        first = sched.queue_positions()
        assert sched.queue_positions() is first  # nothing happened: cached
        sched.resume()  # an event: the first job starts
        after = sched.queue_positions()
        assert after is not first
        assert len(after) == len(first) - 1
        assert sorted(p for _t, p in after.values()) == list(range(1, len(after) + 1))
        assert all(
            after[job_id][1] < position
            for job_id, (_tier, position) in first.items()
            if job_id in after
        )
        await asyncio.gather(*handles)
        assert sched.queue_positions() == {}
