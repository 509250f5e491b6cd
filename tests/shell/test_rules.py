"""One test (at least) per scheduling rule of docs/design.md §4, in virtual time."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.helpers import (
    TOKEN,
    Recorder,
    first_token_time,
    resumable_work_for,
    runner,
    work_for,
)
from tests.payloads import MESSAGES
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
from tierlm.core import Job, TieredPolicy, default_classes
from tierlm.runners import SimulatedRunner
from tierlm.testing import next_start


async def test_foreground_subject_hoists_only_its_subject_not_the_backfill() -> None:
    """docs/design.md §6.2: opening note 7 makes note 7's extraction T1, not all 500."""

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


async def test_budget_is_work_conserving_when_extract_is_alone() -> None:
    async with Scheduler(runner()) as sched:
        rec = Recorder.attach(sched)
        jobs = [sched.submit("extract", "m1", work_for(10)) for _ in range(60)]
        await asyncio.gather(*jobs)
        # 600 s of extraction back to back: the device never idled for the cap.
        assert sched.now() == pytest.approx(600.0)
        assert rec.busy_by_class(0, 600, sched.now()) == {"extract": pytest.approx(600.0)}
        assert sched.snapshot().budget_share["extract"] == pytest.approx(1.0)


async def test_budget_holds_when_contended_and_counts_the_running_job() -> None:
    """A custom 25 % budget; the share is measured continuously, so a long
    running job is seen before it ends."""

    classes = [
        TaskClass("index", tier=2, budget=Budget(0.25, window=100.0)),
        TaskClass("agent", tier=4, fair=True),
    ]

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


async def test_edf_order_inside_t3() -> None:
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


async def test_deadline_passing_while_queued_preempts_t4_without_any_other_event() -> None:
    # A slice longer than the test isolates the deadline rule from the pool's
    # own slice preemption (docs/design.md §4), which would switch at t=4 anyway.
    config = SchedulerConfig(slice=1000.0)

    async with Scheduler(runner(), config=config) as sched:
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


async def test_new_producer_starts_level_and_a_forgotten_one_starts_afresh() -> None:
    """docs/design.md §4.4: a newcomer is placed at the average of the
    producers present (zero lag), so it neither runs alone on "credit" nor
    waits behind their history; one away longer than idle_reset is forgotten."""

    async with Scheduler(runner()) as sched:
        rec = Recorder.attach(sched)
        a_jobs = [
            sched.submit("gana", "m1", resumable_work_for(10), producer="A") for _ in range(12)
        ]
        await asyncio.sleep(40.5)  # A ran alone for 40.5 s
        b_jobs = [
            sched.submit("gana", "m1", resumable_work_for(10), producer="B") for _ in range(4)
        ]
        snap = sched.snapshot().vruntime
        assert snap["B"] == pytest.approx(snap["A"]) == pytest.approx(40.5)
        await asyncio.gather(*b_jobs)
        # Level start: from B's arrival until its 40 s were served, A had as
        # much, within a slice, instead of B running four jobs in a row.
        shares = rec.busy_by_producer(40.5, sched.now(), sched.now())
        assert shares["B"] == pytest.approx(40.0, abs=TOKEN)
        assert abs(shares["A"] - shares["B"]) <= SchedulerConfig().slice + TOKEN
        await asyncio.gather(*a_jobs)

        # B away > idle_reset (300 s) while A works on: B is forgotten ...
        more_a = [
            sched.submit("gana", "m1", resumable_work_for(10), producer="A") for _ in range(40)
        ]
        await asyncio.sleep(310)
        assert "B" not in sched.snapshot().vruntime
        # ... and on return starts afresh, level with A.
        sched.submit("gana", "m1", work_for(10), producer="B")
        snap = sched.snapshot().vruntime
        assert snap["B"] == pytest.approx(snap["A"])
        for h in more_a:
            h.cancel()


async def test_short_absence_banks_no_credit() -> None:
    """VTC's on/off case: B leaves for 200 s (< idle_reset) while A runs on; on
    return B starts within its clamped lag of A (two slices at most) instead of
    running alone on 200 s of banked credit."""
    slice_ = SchedulerConfig().slice

    async with Scheduler(runner()) as sched:
        rec = Recorder.attach(sched)
        a = [sched.submit("gana", "m1", resumable_work_for(10), producer="A") for _ in range(40)]
        b = [sched.submit("gana", "m1", resumable_work_for(10), producer="B") for _ in range(2)]
        await asyncio.gather(*b)  # B's backlog ends around t = 40 s
        await asyncio.sleep(200)
        back = sched.now()
        vb_before = sched.snapshot().vruntime["B"]
        b2 = [sched.submit("gana", "m1", resumable_work_for(10), producer="B") for _ in range(6)]
        snap = sched.snapshot()
        assert abs(snap.vruntime["B"] - snap.vruntime["A"]) <= 2 * 2 * slice_ + 1e-6
        assert snap.vruntime["B"] > vb_before + 150
        await asyncio.sleep(60)
        # The minute after its return B gets about half, not the whole device.
        shares = rec.busy_by_producer(back, back + 60, sched.now())
        assert shares["B"] <= 30 + 2 * slice_ + TOKEN
        assert shares["A"] >= 30 - 2 * slice_ - TOKEN
        for h in a + b2:
            h.cancel()


def test_return_keeps_what_was_owed_and_banks_nothing() -> None:
    """The pool's lag rule on the pure core: a producer that leaves owed keeps
    what it was owed (clamped to two slices), earns nothing while away, and is
    forgotten after idle_reset (docs/design.md §4.4)."""
    classes = default_classes()
    policy = TieredPolicy(classes, SchedulerConfig())
    slice_ = policy.config.slice
    ids = iter(range(1, 1000))

    def job(producer: str, now: float) -> Job:
        return Job(next(ids), classes["gana"], "m1", producer, None, None, now)

    def lag_of_a() -> float:  # two producers: V is their mean, A's lag is V - v_A
        v = policy.vruntimes(0)
        return (v["B"] - v["A"]) / 2

    b_job = job("B", 0.0)
    policy.submit(b_job, 0.0)
    a_job = job("A", 0.0)
    policy.submit(a_job, 0.0)
    assert next_start(policy, 0.0, "m1") is b_job  # level; B came first
    policy.finished(b_job, 7.0)  # B ran 7 s while A waited
    policy.requeue(b_job, 7.0)
    assert lag_of_a() == pytest.approx(3.5)
    policy.remove(a_job, 7.0)  # A leaves, owed 3.5 s
    assert next_start(policy, 7.0, "m1") is b_job
    policy.finished(b_job, 30.0)  # B runs on alone for 23 s
    policy.requeue(b_job, 30.0)
    policy.submit(job("A", 90.0), 90.0)  # back after 83 s < idle_reset
    # Owed 3.5 s when it left: kept, not lost (0), nor grown by B's 23 s alone
    # (banked absence: 15).
    assert lag_of_a() == pytest.approx(3.5)
    assert lag_of_a() <= 2 * slice_

    back = next(j for j in policy.queued() if j.producer == "A")
    policy.remove(back, 95.0)
    policy.submit(job("A", 95.0 + 301.0), 95.0 + 301.0)  # back after > idle_reset
    assert lag_of_a() == pytest.approx(0.0)


async def test_chat_page_open_holds_the_model_until_chat_idle_then_swaps() -> None:
    """docs/design.md §4.8: while the chat page is open, no swap away
    until the last chat is chat_idle (60 s) old, never longer. grace_factor is
    raised so the ski-rental cap (tested below) does not bind first."""
    config = SchedulerConfig(grace_factor=100.0)

    async with Scheduler(runner("X"), config=config) as sched:
        rec = Recorder.attach(sched)
        await sched.run("chat", "X", work_for(1))
        last_chat = sched.now()
        sched.set_foreground("chat")  # the person is on the chat page
        other = sched.submit("gana", "Y", work_for(5))
        await asyncio.sleep(45)  # past chat_grace (30 s), within chat_idle
        assert sched.stats.swaps == 0
        await other
        assert rec.kinds(SwapStarted)[0].time == pytest.approx(last_chat + 60.0)


async def test_ski_rental_a_fast_swap_never_idles_the_device_for_a_chat_hold() -> None:
    """With work queued for another model, the device idles at most a few
    measured swap times: with the chat page open OPEN_PAGE_SWAPS (10) x, 1 s
    for a 0.1 s swap, not the 60 s chat_idle; without it grace_factor (3) x,
    0.3 s, not the 30 s chat_grace (docs/design.md §4.8)."""

    device = SimulatedRunner(token_interval=TOKEN, swap_seconds=0.1, initial_model="X")
    async with Scheduler(device) as sched:
        rec = Recorder.attach(sched)
        await sched.run("gana", "Y", work_for(1))  # measures a 0.1 s swap
        await sched.run("chat", "X", work_for(1))
        last_chat = sched.now()
        sched.set_foreground("chat")
        await sched.run("gana", "Y", work_for(1))
        swaps = [e.time for e in rec.kinds(SwapStarted)]
        assert swaps[-1] == pytest.approx(last_chat + 10 * 0.1)
        await sched.run("chat", "X", work_for(1))
        last_chat = sched.now()
        sched.set_foreground(None)
        await sched.run("gana", "Y", work_for(1))
        swaps = [e.time for e in rec.kinds(SwapStarted)]
        assert swaps[-1] == pytest.approx(last_chat + 3 * 0.1)


async def test_decay_period_has_no_effect_and_says_so() -> None:
    """The seed halved every vruntime every 300 s so that history faded. The
    EEVDF pool keeps no history to fade (lag is clamped to two slices and
    forgotten after idle_reset), so decay_period is no setting of the policy
    (a gateway file naming it still loads, and warns), and a vruntime is never
    halved (docs/design.md §4.4)."""
    assert "decay_period" not in {f.name for f in dataclasses.fields(SchedulerConfig)}

    async with Scheduler(runner()) as sched:
        await sched.run("gana", "m1", work_for(100), producer="A")
        await asyncio.sleep(250)  # away less than idle_reset: remembered as it was
        sched.submit("gana", "m1", work_for(1), producer="other")
        assert sched.snapshot().vruntime["A"] == pytest.approx(100.0)


async def test_cancelled_run_is_charged_you_ran_you_pay() -> None:
    async with Scheduler(runner()) as sched:
        job = sched.submit("gana", "m1", work_for(100), producer="A")
        await asyncio.sleep(7)
        assert job.cancel()
        with pytest.raises(Cancelled) as err:
            await job
        assert err.value.reason is CancelReason.CALLER
        # Charged up to the token boundary where it stopped.
        assert 7.0 <= sched.snapshot().vruntime["A"] <= 7.0 + TOKEN + 1e-9


async def test_charge_includes_the_swap_the_job_caused_and_weights_scale_it() -> None:
    config = SchedulerConfig(weights={"heavy": 2.0})
    async with Scheduler(runner("m1"), config=config) as sched:
        await sched.run("gana", "m2", work_for(5), producer="light")
        assert sched.snapshot().vruntime["light"] == pytest.approx(15.0)  # 10 s swap + 5 s
        handle = sched.submit("gana", "m1", work_for(5), producer="heavy")
        seeded = sched.snapshot().vruntime["heavy"]
        await handle
        # (10 s swap back + 5 s) / weight 2
        assert sched.snapshot().vruntime["heavy"] - seeded == pytest.approx(7.5)


async def test_no_preemption_that_would_only_restart_the_same_job() -> None:
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


async def test_no_preemption_for_a_pointless_swap() -> None:
    """An overdue job on another model does not stop same-model work to swap
    (affinity), until it has waited max_affinity_wait."""

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


async def test_chat_is_never_requeued_and_its_caller_gets_a_clear_error() -> None:
    async with Scheduler(runner()) as sched:
        rec = Recorder.attach(sched)
        chat = sched.submit("chat", "m1", work_for(10))
        await asyncio.sleep(1)
        other_chat = sched.submit("chat", "m1", work_for(1))
        await sched.pause()  # pause lets a chat finish: it is never preempted
        assert (await chat) == 200
        sched.resume()
        await other_chat
        stream = sched.generate("chat", "m1", MESSAGES, max_tokens=100)
        task = asyncio.create_task(first_token_time(stream))
        await asyncio.sleep(1)
        await sched.aclose()
        with pytest.raises(Cancelled, match="shutdown") as err:
            await task
        assert err.value.reason is CancelReason.SHUTDOWN
        assert not [e for e in rec.kinds(Requeued) if e.job.class_name == "chat"]


async def test_swap_batching_one_swap_serves_a_batch() -> None:
    async with Scheduler(runner("A")) as sched:
        rec = Recorder.attach(sched)
        await asyncio.sleep(0)
        blocker = sched.submit("gana", "A", resumable_work_for(5), producer="first")
        jobs = [blocker] + [
            sched.submit("gana", model, resumable_work_for(5), producer=f"p{i}")
            for i, model in enumerate(["B", "A", "B", "C", "A", "B", "C"])
        ]
        await asyncio.gather(*jobs)
        # Slices interleave the jobs of one model (docs/design.md §4), but
        # each model's batch runs between two swaps: A, then B, then C.
        models = [r.model_id for r in rec.runs]
        batches = [m for i, m in enumerate(models) if i == 0 or m != models[i - 1]]
        assert batches == ["A", "B", "C"]
        assert sched.stats.swaps == 2  # the minimum for three models starting on A


async def test_max_affinity_wait_bounds_starvation() -> None:
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


async def test_aclose_resolves_every_handle() -> None:
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


async def test_a_failing_work_fails_only_its_own_handle() -> None:
    async def boom(ctx: JobContext) -> None:
        raise RuntimeError("producer bug")

    async with Scheduler(runner()) as sched:
        bad = sched.submit("gana", "m1", boom)
        good = sched.submit("gana", "m1", work_for(1))
        with pytest.raises(RuntimeError, match="producer bug"):
            await bad
        assert await good == 20
        assert sched.stats.failed == 1 and sched.stats.completed == 1


async def test_failed_swap_fails_only_that_job_naming_the_model() -> None:
    async with Scheduler(runner("m1", models={"m1", "m2"})) as sched:
        bad = sched.submit("gana", "missing", work_for(1))
        good = sched.submit("gana", "m2", work_for(1))
        with pytest.raises(Exception, match="'missing'"):
            await bad
        assert await good == 20
        assert sched.loaded_model == "m2"


async def test_stuck_job_is_reported_and_not_waited_on_forever() -> None:
    async def deaf(ctx: JobContext) -> str:
        await asyncio.sleep(1000)  # never looks at its cancel token
        return "late"

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


async def test_user_cancel_during_preemption_is_not_lost() -> None:
    async with Scheduler(runner()) as sched:
        job = sched.submit("gana", "m1", work_for(30))
        await asyncio.sleep(1.01)
        sched.submit("chat", "m1", work_for(1))  # starts preempting the gana
        assert job.cancel()  # before the token boundary
        with pytest.raises(Cancelled) as err:
            await job
        assert err.value.reason is CancelReason.CALLER
        assert sched.stats.requeues == 0
