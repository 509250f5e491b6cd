"""One test (at least) per scheduling rule of docs/design.md §4, in virtual time."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import MSG, TOKEN, Recorder, first_token_time, runner, work_for
from tierlm import (
    Budget,
    Cancelled,
    CancelReason,
    JobContext,
    JobStuck,
    Requeued,
    Scheduler,
    SchedulerConfig,
    SwapFinished,
    SwapStarted,
    TaskClass,
)
from tierlm.testing import run_virtual


def test_foreground_subject_hoists_only_its_subject_not_the_backfill() -> None:
    """docs/design.md §6.2: opening note 7 makes note 7's extraction T1, not all 500."""

    async def main() -> None:
        async with Scheduler(runner()) as sched:
            sched.submit("gana", "m1", work_for(30))  # occupies the device
            await asyncio.sleep(1)
            backfill = [
                sched.submit("extract", "m1", work_for(2), subject=f"note-{i}") for i in range(20)
            ]
            sched.set_foreground("extract", subject="note-7")
            await asyncio.sleep(0.1)
            snap = sched.snapshot()
            assert snap.running is not None and snap.running.subject == "note-7"
            assert snap.running.tier == 1
            assert len(snap.queued[1]) == 0
            assert len(snap.queued[2]) == 19  # the rest of the backfill stays T2
            # Without a subject the whole class is the foreground (the seed's rule).
            sched.set_foreground("extract")
            assert len(sched.snapshot().queued[1]) == 19
            for h in backfill:
                h.cancel()

    run_virtual(main())


def test_budget_is_work_conserving_when_extract_is_alone() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            jobs = [sched.submit("extract", "m1", work_for(10)) for _ in range(60)]
            await asyncio.gather(*jobs)
            # 600 s of extraction back to back: the device never idled for the cap.
            assert sched.now() == pytest.approx(600.0)
            assert rec.busy_by_class(0, 600, sched.now()) == {"extract": pytest.approx(600.0)}
            assert sched.snapshot().budget_share["extract"] == pytest.approx(1.0)

    run_virtual(main())


def test_budget_holds_when_contended_and_counts_the_running_job() -> None:
    """A custom 25 % budget; the share is measured continuously, so a long
    running job is seen before it ends."""

    classes = [
        TaskClass("index", tier=2, budget=Budget(0.25, window=100.0)),
        TaskClass("agent", tier=4, fair=True),
    ]

    async def main() -> None:
        async with Scheduler(runner(), classes=classes) as sched:
            rec = Recorder.attach(sched)
            agents = [sched.submit("agent", "m1", work_for(5)) for _ in range(200)]
            index = [sched.submit("index", "m1", work_for(5)) for _ in range(200)]
            await asyncio.sleep(1000)
            now = sched.now()
            for end in range(200, 1001, 100):
                busy = rec.busy_by_class(end - 100, end, now)
                share = busy.get("index", 0) / sum(busy.values())
                assert 0.2 <= share <= 0.25 + 5 / 100 + 1e-9, (end, busy)
            await asyncio.sleep(10)
            share_now = sched.snapshot().budget_share["index"]
            assert 0.2 <= share_now <= 0.3
            for h in agents + index:
                h.cancel()

    run_virtual(main())


def test_edf_order_inside_t3() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            blocker = sched.submit("extract", "m1", work_for(50))
            await asyncio.sleep(1)
            # All overdue by the time the device frees up; EDF, not FIFO.
            late = [
                sched.submit("gana", "m1", work_for(1), deadline=d, producer=f"g{d}")
                for d in (30, 10, 20)
            ]
            await asyncio.gather(blocker, *late)
            order = [r.job_id for r in rec.runs if r.class_name == "gana"]
            assert order == [late[1].id, late[2].id, late[0].id]

    run_virtual(main())


def test_deadline_passing_while_queued_preempts_t4_without_any_other_event() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            nataraj = sched.submit("nataraj", "m1", work_for(100))
            await asyncio.sleep(1)
            gana = sched.submit("gana", "m1", work_for(2), deadline=sched.now() + 20.0)
            await gana
            # Nothing else happened at t=21: the deadline alone woke the scheduler.
            assert rec.starts(gana.id)[0] == pytest.approx(21.0, abs=TOKEN + 1e-9)
            assert rec.starts(gana.id)[0] >= 21.0
            await nataraj
            assert sched.stats.preemptions == 1

    run_virtual(main())


def test_new_producer_is_seeded_at_min_vruntime_and_idle_return_is_reseeded() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            a_jobs = [sched.submit("gana", "m1", work_for(10), producer="A") for _ in range(12)]
            await asyncio.sleep(40.5)  # A ran 4 jobs alone: vruntime 40
            b_jobs = [sched.submit("gana", "m1", work_for(10), producer="B") for _ in range(4)]
            assert sched.snapshot().vruntime["B"] == pytest.approx(40.0)
            await asyncio.gather(*b_jobs)
            # Seeded at A's vruntime, B alternates with A instead of running 4 in a row.
            producers = [r.producer for r in rec.runs if r.start >= 40]
            assert (
                producers[:8] == ["A", "B"] * 4
                or producers[:8] == ["B", "A"] * 4
                or producers[1:9] == ["B", "A"] * 4
            )
            await asyncio.gather(*a_jobs)

            # B returns after > 300 s idle: re-seeded to the present minimum, which
            # here is A's (A is still running its backlog).
            vb_before = sched.snapshot().vruntime["B"]
            more_a = [sched.submit("gana", "m1", work_for(10), producer="A") for _ in range(40)]
            await asyncio.sleep(310)
            va = sched.snapshot().vruntime["A"]
            sched.submit("gana", "m1", work_for(10), producer="B")
            vb = sched.snapshot().vruntime["B"]
            assert vb == pytest.approx(va)
            assert vb != pytest.approx(vb_before)
            for h in more_a:
                h.cancel()

    run_virtual(main())


def test_short_absence_banks_no_credit() -> None:
    """VTC's on/off case: B leaves for 200 s (< idle_reset) while A runs on; on
    return B starts level with A instead of running alone on banked credit."""

    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            a = [sched.submit("gana", "m1", work_for(10), producer="A") for _ in range(40)]
            b = [sched.submit("gana", "m1", work_for(10), producer="B") for _ in range(2)]
            await asyncio.gather(*b)  # B's backlog ends at t = 40 s
            await asyncio.sleep(200)
            back = sched.now()
            vb_before = sched.snapshot().vruntime["B"]
            b2 = [sched.submit("gana", "m1", work_for(10), producer="B") for _ in range(6)]
            snap = sched.snapshot()
            assert snap.vruntime["B"] == pytest.approx(snap.vruntime["A"])
            assert snap.vruntime["B"] > vb_before + 150
            await asyncio.gather(*b2)
            after = [r.producer for r in rec.runs if r.start >= back - 10]
            # Alternation, not six B jobs in a row.
            assert "B,B,B" not in ",".join(after)
            for h in a:
                h.cancel()

    run_virtual(main())


def test_return_keeps_what_was_owed_and_banks_nothing() -> None:
    """The fair pool's return rule, on the pure core (no loop needed)."""
    from tierlm.core.fairness import FairPool

    pool = FairPool()
    pool.advance(0.0)
    for producer in ("A", "B"):
        pool.job_arrived(producer, 0.0)
    pool.charge("A", 70.0)
    pool.charge("B", 100.0)
    pool.job_left("A", 10.0)  # A leaves 30 s behind B: it is owed 30 s
    pool.charge("B", 50.0)  # B runs on while A is away
    pool.job_arrived("A", 70.0)  # back after 60 s < idle_reset
    # Owed 30 s below B (150 - 30), not 70 (banked absence) nor 150 (owed lost).
    assert pool.get("A") == pytest.approx(120.0)

    pool.job_left("A", 80.0)
    pool.job_arrived("A", 80.0 + 301.0)  # back after > idle_reset: re-seeded
    assert pool.get("A") == pytest.approx(pool.get("B"))


def test_no_swap_away_from_the_chat_model_while_chat_is_open() -> None:
    async def main() -> None:
        async with Scheduler(runner("X")) as sched:
            rec = Recorder.attach(sched)
            await sched.run("chat", "X", work_for(1))
            sched.set_foreground("chat")  # the person is on the chat page
            other = sched.submit("gana", "Y", work_for(5))
            await asyncio.sleep(120)  # far past chat_grace
            assert sched.stats.swaps == 0
            closed = sched.now()
            sched.set_foreground(None)
            await other
            assert rec.kinds(SwapStarted)[0].time == pytest.approx(closed)

    run_virtual(main())


def test_vruntimes_halve_every_300_seconds() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            await sched.run("gana", "m1", work_for(100), producer="A")
            await sched.run("gana", "m1", work_for(40), producer="B")
            # B arrived when no one was present: seeded at the smallest known (A's).
            assert sched.snapshot().vruntime == {
                "A": pytest.approx(100.0),
                "B": pytest.approx(140.0),
            }
            await asyncio.sleep(300 - sched.now() - 0.001)
            assert sched.snapshot().vruntime["A"] == pytest.approx(100.0)
            await asyncio.sleep(0.002)  # t = 300: one halving
            assert sched.snapshot().vruntime == {"A": pytest.approx(50.0), "B": pytest.approx(70.0)}
            await asyncio.sleep(600)  # two more
            assert sched.snapshot().vruntime == {"A": pytest.approx(12.5), "B": pytest.approx(17.5)}

    run_virtual(main())


def test_cancelled_run_is_charged_you_ran_you_pay() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            job = sched.submit("gana", "m1", work_for(100), producer="A")
            await asyncio.sleep(7)
            assert job.cancel()
            with pytest.raises(Cancelled) as err:
                await job
            assert err.value.reason is CancelReason.CALLER
            # Charged up to the token boundary where it stopped.
            assert 7.0 <= sched.snapshot().vruntime["A"] <= 7.0 + TOKEN + 1e-9

    run_virtual(main())


def test_charge_includes_the_swap_the_job_caused_and_weights_scale_it() -> None:
    async def main() -> None:
        config = SchedulerConfig(weights={"heavy": 2.0})
        async with Scheduler(runner("m1"), config=config) as sched:
            await sched.run("gana", "m2", work_for(5), producer="light")
            assert sched.snapshot().vruntime["light"] == pytest.approx(15.0)  # 10 s swap + 5 s
            handle = sched.submit("gana", "m1", work_for(5), producer="heavy")
            seeded = sched.snapshot().vruntime["heavy"]
            await handle
            # (10 s swap back + 5 s) / weight 2
            assert sched.snapshot().vruntime["heavy"] - seeded == pytest.approx(7.5)

    run_virtual(main())


def test_no_preemption_that_would_only_restart_the_same_job() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            running = sched.submit("gana", "m1", work_for(30), producer="A")
            await asyncio.sleep(1)
            # Foreground makes every gana T1, the running one included: it is
            # the oldest T1 job, so nothing is stopped.
            later = sched.submit("gana", "m1", work_for(5), producer="B")
            sched.set_foreground("gana")
            await asyncio.sleep(1)
            # A same-tier arrival never preempts either.
            sched.submit("gana", "m1", work_for(5), producer="C")
            await running
            assert sched.stats.preemptions == 0
            await later

    run_virtual(main())


def test_no_preemption_for_a_pointless_swap() -> None:
    """An overdue job on another model does not stop same-model work to swap
    (affinity), until it has waited max_affinity_wait."""

    async def main() -> None:
        async with Scheduler(runner("m1")) as sched:
            rec = Recorder.attach(sched)
            sched.submit("nataraj", "m1", work_for(60))
            await asyncio.sleep(1)
            other = sched.submit("gana", "m2", work_for(5), deadline=0.0)  # overdue: T3
            await asyncio.sleep(30)
            assert sched.stats.preemptions == 0 and sched.stats.swaps == 0
            await other
            # Same-model work finished first (59 s left), then one swap.
            assert rec.starts(other.id)[0] == pytest.approx(60.0)
            assert rec.kinds(SwapFinished)[0].time == pytest.approx(70.0)
            assert sched.stats.swaps == 1

    run_virtual(main())


def test_chat_is_never_requeued_and_its_caller_gets_a_clear_error() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            chat = sched.submit("chat", "m1", work_for(10))
            await asyncio.sleep(1)
            other_chat = sched.submit("chat", "m1", work_for(1))
            await sched.pause()  # pause lets a chat finish: it is never preempted
            assert (await chat) == 200
            sched.resume()
            await other_chat
            stream = sched.generate("chat", "m1", MSG, max_tokens=100)
            task = asyncio.create_task(first_token_time(stream))
            await asyncio.sleep(1)
            await sched.aclose()
            with pytest.raises(Cancelled, match="shutdown") as err:
                await task
            assert err.value.reason is CancelReason.SHUTDOWN
            assert not [e for e in rec.kinds(Requeued) if e.job.class_name == "chat"]

    run_virtual(main())


def test_swap_batching_one_swap_serves_a_batch() -> None:
    async def main() -> None:
        async with Scheduler(runner("A")) as sched:
            rec = Recorder.attach(sched)
            await asyncio.sleep(0)
            blocker = sched.submit("gana", "A", work_for(5), producer="first")
            jobs = [blocker] + [
                sched.submit("gana", model, work_for(5), producer=f"p{i}")
                for i, model in enumerate(["B", "A", "B", "C", "A", "B", "C"])
            ]
            await asyncio.gather(*jobs)
            models = [r.model_id for r in rec.runs]
            assert models == ["A", "A", "A", "B", "B", "B", "C", "C"]
            assert sched.stats.swaps == 2  # the minimum for three models starting on A

    run_virtual(main())


def test_max_affinity_wait_bounds_starvation() -> None:
    async def main() -> None:
        async with Scheduler(runner("m1")) as sched:
            rec = Recorder.attach(sched)
            stop = asyncio.Event()

            async def stream_of_m1_work() -> None:
                while not stop.is_set():
                    await sched.run("gana", "m1", work_for(5), producer="busy")

            feeder = asyncio.create_task(stream_of_m1_work())
            feeder2 = asyncio.create_task(stream_of_m1_work())
            await asyncio.sleep(2)
            starving = sched.submit("gana", "m2", work_for(5), producer="other")
            await starving
            start = rec.starts(starving.id)[0]
            waited = start - 2
            # max_affinity_wait (120 s), then the job in progress ends, then the swap.
            assert 120 <= waited <= 120 + 5 + 10 + 1e-9
            stop.set()
            await asyncio.gather(feeder, feeder2)

    run_virtual(main())


def test_aclose_resolves_every_handle() -> None:
    async def main() -> None:
        sched = Scheduler(runner())
        async with sched:
            handles = [
                sched.submit(cls, "m1", work_for(10))
                for cls in ("gana", "nataraj", "extract", "chat", "gana")
            ]
            await asyncio.sleep(3)
        assert all(h.done() for h in handles)
        reasons = []
        for h in handles:
            with pytest.raises(Cancelled) as err:
                h.result()
            reasons.append(err.value.reason)
        assert reasons == [CancelReason.SHUTDOWN] * 5
        assert sched.stats.cancelled == 5

    run_virtual(main())


def test_a_failing_work_fails_only_its_own_handle() -> None:
    async def boom(ctx: JobContext) -> None:
        raise RuntimeError("producer bug")

    async def main() -> None:
        async with Scheduler(runner()) as sched:
            bad = sched.submit("gana", "m1", boom)
            good = sched.submit("gana", "m1", work_for(1))
            with pytest.raises(RuntimeError, match="producer bug"):
                await bad
            assert await good == 20
            assert sched.stats.failed == 1 and sched.stats.completed == 1

    run_virtual(main())


def test_failed_swap_fails_only_that_job_naming_the_model() -> None:
    async def main() -> None:
        async with Scheduler(runner("m1", models={"m1", "m2"})) as sched:
            bad = sched.submit("gana", "missing", work_for(1))
            good = sched.submit("gana", "m2", work_for(1))
            with pytest.raises(Exception, match="'missing'"):
                await bad
            assert await good == 20
            assert sched.loaded_model == "m2"

    run_virtual(main())


def test_stuck_job_is_reported_and_not_waited_on_forever() -> None:
    async def deaf(ctx: JobContext) -> str:
        await asyncio.sleep(1000)  # never looks at its cancel token
        return "late"

    async def main() -> None:
        async with Scheduler(runner()) as sched:
            rec = Recorder.attach(sched)
            stuck = sched.submit("gana", "m1", deaf)
            await asyncio.sleep(1)
            chat_at = sched.now()
            chat = sched.submit("chat", "m1", work_for(1))
            await chat
            assert rec.kinds(JobStuck)
            assert sched.stats.stuck == 1
            # Waited cancel_grace (5 s), then moved on.
            assert rec.starts(chat.id)[0] == pytest.approx(chat_at + 5.0)
            # It was preempted, so re-queued, and runs again once the chat is done.
            assert [e.job.id for e in rec.kinds(Requeued)] == [stuck.id]
            assert stuck.state.value == "running"
            stuck.cancel()
            with pytest.raises(Cancelled):
                await stuck
            assert sched.stats.stuck == 2

    run_virtual(main())


def test_user_cancel_during_preemption_is_not_lost() -> None:
    async def main() -> None:
        async with Scheduler(runner()) as sched:
            job = sched.submit("gana", "m1", work_for(30))
            await asyncio.sleep(1.01)
            sched.submit("chat", "m1", work_for(1))  # starts preempting the gana
            assert job.cancel()  # before the token boundary
            with pytest.raises(Cancelled) as err:
                await job
            assert err.value.reason is CancelReason.CALLER
            assert sched.stats.requeues == 0

    run_virtual(main())
