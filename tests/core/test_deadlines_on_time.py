"""Deadlines on time (docs/design.md §4.8), the operator's opt-in
``SchedulerConfig.deadlines = "on-time"``, against the default: a person at
the open chat page types every 45 s on m1 while a cron job on m2 falls due.
Virtual time, the tests' device (20 tokens/s, 10 s swaps)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.core.test_affinity_across_models import chat_wait, device
from tests.helpers import SWAP, wait_until, work_for
from tierlm import JobContext, Scheduler, SchedulerConfig
from tierlm.core.classes import TaskClass, Tier, default_classes

READING = 45.0  # the person's gap between messages (seed scenario 6's "keeps chatting")
FACTOR = SchedulerConfig().grace_factor  # the bound on finishing: 3 swaps


def cron_job(
    runs: list[float], ends: list[float], seconds: float
) -> Callable[[JobContext], Awaitable[int]]:
    """``seconds`` of work that notes when each of its runs starts (a cut
    run starts over: ``work_for`` restarts from scratch) and when it ends."""

    async def job(ctx: JobContext) -> int:
        runs.append(asyncio.get_running_loop().time())
        tokens = await work_for(seconds)(ctx)
        ends.append(asyncio.get_running_loop().time())
        return tokens

    return job


async def cron_beside_a_person(
    mode: str, job_seconds: float, turns: int = 8, due_in: float = 10.0
) -> tuple[list[float], float, float, list[float]]:
    """The person chats ``turns`` times, one every ``READING`` s; after the
    first chat a cron job of ``job_seconds`` on m2 is submitted, due
    ``due_in`` s later. Its runs' starts, its due time, when it ended, and the chats'
    waits for their first token."""
    config = SchedulerConfig(deadlines=mode)
    async with Scheduler(device("m1", "m2"), config=config) as sched:
        sched.set_foreground("chat")
        waits = [await chat_wait(sched, then=5)]
        runs: list[float] = []
        ends: list[float] = []
        due = sched.now() + due_in
        handle = sched.submit(
            "gana", "m2", cron_job(runs, ends, job_seconds), producer="gana:cron", deadline=due
        )
        await asyncio.sleep(READING - 5)
        for _turn in range(1, turns):
            waits.append(await chat_wait(sched, then=READING))
        await handle
    ended = ends[0] if ends else float("inf")
    return runs, due, ended, waits


async def test_by_default_a_cron_job_waits_for_the_persons_gap_bet() -> None:
    """The default keeps the seed's order: work on another model waits the
    starvation bound, then a gap the person's reading holds; meanwhile no
    message waits for a swap."""
    runs, due, _ended, waits = await cron_beside_a_person("after-people", job_seconds=10)
    assert runs[0] - due >= 100, (runs, due)  # the bound (120 s from submission)
    assert max(waits) <= 0.2, waits


async def test_on_time_a_due_cron_job_gets_its_swap_at_once() -> None:
    """With deadlines on time there is no hold and no gap bet: due 10 s after
    it came, the job presses at once (its lead is 30 s) and swaps in (no
    person's job queued or running), and the device goes back to m1 before
    the person's next message."""
    runs, due, ended, waits = await cron_beside_a_person("on-time", job_seconds=10)
    assert runs[0] - due <= SWAP + 0.5, (runs, due)  # its swap, nothing else
    assert len(runs) == 1, runs
    assert ended - due <= SWAP + 10 + 0.5, (ended, due)
    # swap there (10 s), the job (10 s), swap back (10 s): inside a 45 s read.
    assert max(waits) <= 0.2, waits


async def test_on_time_means_done_by_the_deadline() -> None:
    """A 5 s cron job due 60 s after it came presses ``grace_factor`` swaps
    (30 s) before its deadline: it gets its swap then, and is done before it
    is due. Promoted only when due, it ended a swap and its run late; started
    at once, it would have bet on the person's gap for nothing."""
    runs, due, ended, _waits = await cron_beside_a_person("on-time", job_seconds=5, due_in=60)
    assert ended <= due, (ended, due)
    assert runs[0] >= due - FACTOR * SWAP, (runs, due)  # not before it pressed
    assert len(runs) == 1, runs


async def test_on_time_a_person_waits_for_the_overdue_job_to_finish() -> None:
    """A 30 s cron job is under way on m2 when the person writes (45 s after
    their last message): cut, it would need a second excursion, two more
    swaps a later message may meet. It finishes first (15 s left), then the
    swap back: the person waits for both, once."""
    runs, due, ended, waits = await cron_beside_a_person("on-time", job_seconds=30)
    assert len(runs) == 1, runs  # never cut
    assert ended - due <= SWAP + 30 + 0.5, (ended, due)
    met = [wait for wait in waits if wait > 0.2]
    assert len(met) == 1, waits
    assert met[0] <= 15 + SWAP + 0.5, waits


async def test_on_time_finishing_is_bounded_by_grace_factor_swaps() -> None:
    """A 120 s overdue job would hold the person for 95 s: it keeps the device
    only ``grace_factor`` swaps (30 s) after their message came, then it is
    cut and the device goes back; the person waits that and the swap back."""
    runs, _due, ended, waits = await cron_beside_a_person("on-time", job_seconds=120, turns=12)
    assert len(runs) >= 2, runs  # cut once at least, then run again
    assert ended < float("inf")
    assert max(waits) <= FACTOR * SWAP + SWAP + 0.5, waits


def test_an_unknown_mode_names_the_field_and_the_accepted_values() -> None:
    with pytest.raises(ValueError, match=r"deadlines: must be one of 'after-people', 'on-time'"):
        SchedulerConfig(deadlines="asap")


async def first_start_beside_a_reader(mode: str) -> tuple[float, str]:
    """A person chats once on m1, at the open chat page; 5 s later an
    operator's own tier-3 class (``report``, no deadline) queues a job on m3
    and a cron job already overdue queues on m2. How long after that the
    first of them starts, and which."""
    classes = {**default_classes(), "report": TaskClass("report", Tier.T3)}
    starts: list[tuple[float, str]] = []
    sent: list[float] = []

    def noting(name: str) -> Callable[[JobContext], Awaitable[int]]:
        async def job(ctx: JobContext) -> int:
            starts.append((asyncio.get_running_loop().time(), name))
            return await work_for(1)(ctx)

        return job

    async with Scheduler(device("m1", "m2", "m3"), classes, SchedulerConfig(deadlines=mode)) as s:
        s.set_foreground("chat")
        await chat_wait(s, then=5)
        sent.append(asyncio.get_running_loop().time())
        report = s.submit("report", "m3", noting("report"), producer="reports")
        cron = s.submit("gana", "m2", noting("cron"), producer="gana:cron", deadline=s.now() - 1)
        await asyncio.gather(report, cron)
    at, first = min(starts)
    return at - sent[0], first


async def test_work_without_a_deadline_never_jumps_overdue_work_on_time() -> None:
    """docs/design.md §4.8: "no deadline" means never due, in every rule. By
    default the device holds for the person (~30 s), then runs the overdue
    cron job first (EDF); on time the overdue job gets its swap at once. The
    pressing scan read "no deadline" as due at 0: the report job, never
    due, jumped the overdue one and took the swap at once."""
    default_after, default_first = await first_start_beside_a_reader("after-people")
    assert default_first == "cron" and default_after >= 20, (default_after, default_first)
    on_time_after, on_time_first = await first_start_beside_a_reader("on-time")
    assert on_time_first == "cron", (on_time_after, on_time_first)
    assert on_time_after <= SWAP + 0.5, on_time_after


async def first_token_after(sched: Scheduler, person: str, delay: float) -> float:
    """``person``'s five-token chat on m1, sent ``delay`` s from now: its
    wait for its first token."""
    await asyncio.sleep(delay)
    sent = sched.now()
    async for _piece in sched.generate(
        "chat", model_id="m1", messages=[{"role": "user", "content": "hi"}], producer=person
    ):
        return sched.now() - sent
    raise AssertionError("no token")


async def test_on_time_a_second_persons_message_does_not_extend_the_firsts_wait() -> None:
    """A 120 s overdue cron job runs on m2 when alice writes on m1; bob, who
    has not chatted yet, writes 25 s later. The job finishes at most
    ``grace_factor`` swaps after the first message that met it (alice's),
    then the swap back: alice waits at most 40 s, however many people write
    meanwhile. Measured from the best person's message (bob's turn comes
    first), the job kept the device until 30 s after bob's: alice waited
    65 s."""
    async with Scheduler(device("m1", "m2"), config=SchedulerConfig(deadlines="on-time")) as s:
        s.set_foreground("chat")
        await first_token_after(s, "alice", 0)
        cron = s.submit("gana", "m2", work_for(120), producer="gana:cron", deadline=s.now() - 1)
        alice = asyncio.create_task(first_token_after(s, "alice", 20))
        bob = asyncio.create_task(first_token_after(s, "bob", 45))
        alice_wait, bob_wait = await asyncio.gather(alice, bob)
        await cron
    assert alice_wait <= FACTOR * SWAP + SWAP + 0.5, (alice_wait, bob_wait)
    assert bob_wait <= FACTOR * SWAP + SWAP + 0.5, (alice_wait, bob_wait)


async def test_on_time_a_deadline_job_swapped_for_early_finishes_when_a_person_writes() -> None:
    """With no AI surface open, a 20 s cron job on m2 due in 5 min gets its
    swap by the default's rules once the chat grace has passed, before it
    presses. Alice writes 5 s into that swap. Cut as the swap ended, it had
    done nothing and needed a second excursion (the conversation trace at 8
    slots: 8 of 48 cron jobs, 112 swaps where FIFO made 96); now it
    finishes, within the same bound as pressing work: ``grace_factor``
    swaps after her message, then the swap back."""
    async with Scheduler(device("m1", "m2"), config=SchedulerConfig(deadlines="on-time")) as s:
        await first_token_after(s, "alice", 0)
        runs: list[float] = []
        ends: list[float] = []
        cron = s.submit(
            "gana", "m2", cron_job(runs, ends, 20), producer="gana:cron", deadline=s.now() + 300
        )
        await wait_until(lambda: runs or s.stats.swaps, "the swap to m2")
        wait = await first_token_after(s, "alice", 5)
        await cron
    assert len(runs) == 1, runs  # never cut
    assert wait <= FACTOR * SWAP + SWAP + 0.5, wait
