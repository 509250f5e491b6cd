"""Each baseline's defining behaviour, through the real Scheduler, in virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import TOKEN, Recorder, first_token_time, mixed_queue, runner, work_for
from tests.payloads import MESSAGES
from tierlm import Requeued, Scheduler, default_classes
from tierlm.sim.baselines import (
    FifoPolicy,
    SeedLiteralPolicy,
    StrictPriorityPolicy,
    TwoLanePolicy,
)
from tierlm.sim.policies import POLICIES, make_policy, parse_policy_names


@pytest.mark.parametrize("name", POLICIES)
async def test_every_policy_runs_through_the_shell_and_snapshots(name: str) -> None:
    policy = make_policy(name)
    async with Scheduler(runner(), policy=policy) as sched:
        jobs = [
            sched.submit("gana", "m1", work_for(2), producer="gana:a"),
            sched.submit("extract", "m1", work_for(1), subject="note-1"),
            sched.submit("nataraj", "m2", work_for(1)),
        ]
        snap = sched.snapshot()
        assert snap.policy == name
        assert snap.running is not None and snap.queue_depth == 2
        await asyncio.gather(*jobs)
        assert sched.stats.completed == 3


def test_parse_policy_names() -> None:
    assert parse_policy_names("tierlm, fifo,tierlm") == ["tierlm", "fifo"]
    with pytest.raises(ValueError, match="unknown 'lifo'"):
        parse_policy_names("lifo")


async def test_fifo_never_preempts_and_runs_in_submit_order() -> None:
    async with Scheduler(runner(), policy=FifoPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        gana = sched.submit("gana", "m1", work_for(30))
        extract = sched.submit("extract", "m1", work_for(5))
        await asyncio.sleep(1)
        arrival = sched.now()
        first, _ = await first_token_time(sched.generate("chat", "m1", MESSAGES, max_tokens=5))
        assert first is not None
        # The chat waited for everything submitted before it, 34 s in all.
        assert first - arrival == pytest.approx(29 + 5 + TOKEN)
        await asyncio.gather(gana, extract)
        assert sched.stats.preemptions == 0
        assert [r.class_name for r in rec.runs] == ["gana", "extract", "chat"]


async def test_two_lane_chat_waits_behind_queued_high_lane_nataraj() -> None:
    """Issue #118: Nataraj on runHigh (highPriority: true), chat FIFO behind it."""

    async with Scheduler(runner(), policy=TwoLanePolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        sched.set_foreground("chat")  # the person opens Shiv chat
        cards = [sched.submit("nataraj", "m1", work_for(15)) for _ in range(3)]
        extract = sched.submit("extract", "m1", work_for(2))
        await asyncio.sleep(5)
        arrival = sched.now()
        first, _ = await first_token_time(sched.generate("chat", "m1", MESSAGES, max_tokens=5))
        assert first is not None
        # Behind the running card and the two queued ones: 40 s.
        assert first - arrival == pytest.approx(40 + TOKEN)
        assert sched.stats.preemptions == 0
        # pauseLowPriority: the extraction waits while chat is open, even idle.
        await asyncio.gather(*cards)
        await asyncio.sleep(30)
        assert not extract.done()
        assert sched.snapshot().running is None
        sched.set_foreground(None)  # the person leaves chat
        await extract
        assert [r.class_name for r in rec.runs][-1] == "extract"


async def test_two_lane_high_lane_starts_first_when_the_low_lane_runs() -> None:
    async with Scheduler(runner(), policy=TwoLanePolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        low = [sched.submit("gana", "m1", work_for(10)) for _ in range(2)]
        card = sched.submit("nataraj", "m1", work_for(5))
        await asyncio.gather(card, *low)
        assert [r.class_name for r in rec.runs] == ["gana", "nataraj", "gana"]


async def test_strict_priority_starves_the_fair_pool_under_constant_extraction() -> None:
    async with Scheduler(runner(), policy=StrictPriorityPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        gana = sched.submit("gana", "m1", work_for(10))
        nataraj = sched.submit("nataraj", "m1", work_for(10))
        await asyncio.sleep(3)
        # An extraction every 2 s, 3 s each: T2 is never empty.
        notes = []
        for _ in range(300):
            notes.append(sched.submit("extract", "m1", work_for(3)))
            await asyncio.sleep(2)
        # The running Gana was preempted by the first extraction; then, for
        # 600 s, nothing but extraction ran (no budget, no fairness).
        assert [r.how for r in rec.runs if r.job_id == gana.id] == ["requeued"]
        assert rec.busy_by_class(3.1, sched.now(), sched.now()).keys() == {"extract"}
        assert not gana.done() and not nataraj.done()
        for h in [gana, nataraj, *notes]:
            h.cancel()


async def test_strict_priority_preempts_lower_classes_only() -> None:
    async with Scheduler(runner(), policy=StrictPriorityPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        extract = sched.submit("extract", "m1", work_for(10))
        await asyncio.sleep(1)
        gana = sched.submit("gana", "m1", work_for(1))  # lower: waits
        await asyncio.sleep(1)
        assert sched.stats.preemptions == 0
        chat = sched.submit("chat", "m1", work_for(1))  # higher: preempts
        await asyncio.gather(extract, gana, chat)
        assert sched.stats.preemptions == 1
        assert [r.class_name for r in rec.runs] == ["extract", "chat", "extract", "gana"]


async def test_seed_literal_two_ganas_of_one_kind_do_not_alternate() -> None:
    """docs/design.md §6.1: the seed keeps vruntime per kind, so Gana-A's backlog runs
    before Gana-B starts (seed scenario 2 expects alternation)."""

    async with Scheduler(runner(), policy=SeedLiteralPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        a = [sched.submit("gana", "m1", work_for(30), producer="gana:A") for _ in range(4)]
        b = [sched.submit("gana", "m1", work_for(30), producer="gana:B") for _ in range(4)]
        await asyncio.gather(*a, *b)
        assert [r.producer for r in rec.runs] == ["gana:A"] * 4 + ["gana:B"] * 4


async def test_seed_literal_opened_note_hoists_the_whole_backfill() -> None:
    """docs/design.md §6.2: the seed's foreground is a kind, so opening one note makes
    every queued extraction T1, where the budget does not apply."""

    async with Scheduler(runner(), policy=SeedLiteralPolicy(default_classes())) as sched:
        sched.submit("gana", "m1", work_for(30))
        await asyncio.sleep(1)
        backfill = [
            sched.submit("extract", "m1", work_for(2), subject=f"note-{i}") for i in range(20)
        ]
        sched.set_foreground("extract", subject="note-7")
        await asyncio.sleep(0.1)
        snap = sched.snapshot()
        # The running Gana was preempted (T1 < T4) and 19 notes wait at T1.
        assert snap.running is not None and snap.running.class_name == "extract"
        assert len(snap.queued[1]) == 19 and len(snap.queued[2]) == 0
        for h in backfill:
            h.cancel()


async def test_seed_literal_budget_is_not_work_conserving() -> None:
    """docs/design.md §6.4: with only extraction queued and its budget blown, the seed's
    picker returns nothing: the device idles until the next arrival."""

    async with Scheduler(runner(), policy=SeedLiteralPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        notes = [sched.submit("extract", "m1", work_for(10)) for _ in range(3)]
        await asyncio.sleep(35)
        # One note ran (10 s, 100 % extraction > 60 %); the others wait, idle.
        assert len(rec.runs) == 1 and sched.snapshot().running is None
        assert sched.snapshot().queue_depth == 2
        sched.submit("gana", "m1", work_for(1))  # an arrival pumps the picker
        await asyncio.sleep(0.1)
        snap = sched.snapshot()
        assert snap.running is not None and snap.running.class_name == "gana"
        for h in notes:
            h.cancel()


async def test_seed_literal_arrival_cancels_a_job_only_to_restart_it() -> None:
    """docs/design.md §6.6: an arrival of a lower tier cancels the running job even when
    the picker then cannot run the newcomer (its T2 budget is blown)."""

    async with Scheduler(runner(), policy=SeedLiteralPolicy(default_classes())) as sched:
        rec = Recorder.attach(sched)
        await sched.run("extract", "m1", work_for(10))  # budget now blown (100 %)
        gana = sched.submit("gana", "m1", work_for(20), deadline=sched.now() - 1)
        await asyncio.sleep(5)
        note = sched.submit("extract", "m1", work_for(2))  # T2 < T3: cancels the Gana
        await gana
        starts = rec.starts(gana.id)
        assert len(starts) == 2 and starts[1] == pytest.approx(starts[0] + 5 + TOKEN, abs=1e-6)
        assert rec.kinds(Requeued)[0].job is gana.job
        note.cancel()


@pytest.mark.parametrize(
    "policy", [FifoPolicy, TwoLanePolicy, StrictPriorityPolicy, SeedLiteralPolicy]
)
async def test_queue_order_is_the_real_dispatch_order(policy: type[Any]) -> None:
    """Policy.queue_order of every baseline: the order the queue then really runs in."""

    async with Scheduler(runner("m1"), policy=policy(default_classes())) as sched:
        handles = await mixed_queue(sched)
        predicted = [job.id for job in sched.policy.queue_order(sched.now(), "m1")]
        positions = sched.queue_positions()
        rec = Recorder.attach(sched)
        sched.resume()
        await asyncio.gather(*handles)
        assert sorted(predicted) == sorted(h.id for h in handles)
        assert rec.order() == predicted
        assert [positions[i][1] for i in predicted] == list(range(1, len(handles) + 1))
