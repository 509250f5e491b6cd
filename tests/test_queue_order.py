"""The real queue order (``Policy.queue_order``, ``Scheduler.queue_positions``):
positions are the order in which the jobs then really run (docs/design.md §2
snapshot, §4), in virtual time."""

from __future__ import annotations

import asyncio

from tests.helpers import Recorder, mixed_queue, runner
from tierlm import Scheduler, SchedulerConfig
from tierlm.testing import run_virtual


def test_positions_are_the_real_dispatch_order_at_every_tier() -> None:
    # Positions model nothing that running the jobs changes (Policy.queue_order).
    # Here chats, the opened card and extraction take most of the device, so
    # the pool floor (docs/design.md §4 deadlines are loans) would close the
    # overdue rounds' loans halfway through: it is left out of this queue.
    config = SchedulerConfig(pool_floor=0.0)

    async def main() -> None:
        async with Scheduler(runner("m1"), config=config) as sched:
            handles = await mixed_queue(sched)
            positions = dict(sched.queue_positions())
            snap = sched.snapshot()
            rec = Recorder.attach(sched)
            sched.resume()
            await asyncio.gather(*handles)

        predicted = sorted(positions, key=lambda job_id: positions[job_id][1])
        assert rec.order() == predicted
        assert sorted(p for _tier, p in positions.values()) == list(range(1, len(handles) + 1))
        by_id = {h.id: h for h in handles}
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

    run_virtual(main())


def test_positions_are_cached_until_the_next_event() -> None:
    async def main() -> None:
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

    run_virtual(main())
