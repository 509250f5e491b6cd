"""Persons in turn (docs/design.md §4.2): chat is first come, first served per
person, not across people."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tierlm import Scheduler
from tierlm.core.classes import default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Job
from tierlm.core.tiered import TieredPolicy
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.shell.events import JobStarted, SchedulerEvent
from tierlm.testing import next_start

CLASSES = default_classes()


def test_the_queue_order_is_the_order_chats_start_round_robin_by_person() -> None:
    policy = TieredPolicy(CLASSES, SchedulerConfig())
    ids = itertools.count(1)
    flood = [Job(next(ids), CLASSES["chat"], "m1", "alice", None, None, 0.0) for _ in range(5)]
    others = [Job(next(ids), CLASSES["chat"], "m1", f"p{i}", None, None, 0.0) for i in range(3)]
    for job in (*flood, *others):
        policy.submit(job, 0.0)
    expected = [job.id for job in policy.queue_order(0.0, "m1")]
    started = []
    now = 0.0
    while len(policy):
        job = next_start(policy, now, "m1")
        assert job is not None
        started.append(job.id)
        now += 1.0
        policy.finished(job, now)
    assert started == expected
    # Alice's first, then each other person once, before Alice's second.
    assert started[:5] == [flood[0].id, *(o.id for o in others), flood[1].id]


async def test_one_persons_twenty_chats_delay_nine_others_by_one_answer_at_most() -> None:
    runner = SimulatedRunner(token_interval=0.05, initial_model="m1")
    async with Scheduler(runner) as sched:

        async def chat(person: str) -> float:
            submitted = sched.now()
            first = None
            async for _piece in sched.generate(
                "chat",
                model_id="m1",
                producer=person,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=100,
            ):
                if first is None:
                    first = sched.now()
            assert first is not None
            return first - submitted

        flood = [asyncio.create_task(chat("alice")) for _ in range(20)]
        await asyncio.sleep(0)
        waits = await asyncio.gather(*(chat(f"person{i}") for i in range(9)))
        await asyncio.gather(*flood)
    answer = 100 * 0.05
    # FCFS across people made them wait 19-20 answers (95-100 s); in turn, each
    # waits for Alice's one answer under way and the persons ahead of it.
    assert max(waits) <= 10 * answer + 0.5, waits


def test_a_keys_named_persons_share_its_turn() -> None:
    """docs/design.md §4.2 (whose turns): a key's 24 chats under 24 names
    are served in turn among themselves, within the key's one turn: another
    person waits for one of them, not for all 24 (it waited for all 24 when
    each name was a person of its own); the key's unnamed chats are one more
    person among its names."""
    policy = TieredPolicy(CLASSES, SchedulerConfig())
    ids = itertools.count(1)

    def chat(person: tuple[str, ...]) -> Job:
        producer = "/".join(person)
        job = Job(next(ids), CLASSES["chat"], "m1", producer, None, None, 0.0, person=person)
        policy.submit(job, 0.0)
        return job

    named = [chat(("app", f"id{i}")) for i in range(24)]
    unnamed = chat(("app",))
    other = chat(("other",))
    expected = [job.id for job in policy.queue_order(0.0, "m1")]
    started = []
    while len(policy):
        job = next_start(policy, float(len(started)), "m1")
        assert job is not None
        started.append(job.id)
        policy.finished(job, float(len(started)))
    assert started == expected
    assert started[:3] == [named[0].id, other.id, named[1].id]
    assert started[2:] == [*(job.id for job in named[1:]), unnamed.id]


@pytest.mark.parametrize("slots", [1, 8])
async def test_ten_people_sending_five_chats_at_once_are_served_round_by_round(slots: int) -> None:
    """docs/design.md §4.7 (persons in turn on slots): every person's r-th chat
    starts before anyone's (r+1)-th, on one slot and on eight, though the
    first person's five arrive while eight slots are free."""

    runner = SimulatedRunner(token_interval=0.05, initial_model="m1", slots=slots)
    firsts: list[str] = []
    seen: set[int] = set()

    def on_event(event: SchedulerEvent) -> None:
        if isinstance(event, JobStarted) and event.job.id not in seen:
            seen.add(event.job.id)  # a chat that yielded to a person resumes: once
            firsts.append(event.job.producer)

    async with Scheduler(runner) as sched:
        sched.add_listener(on_event)
        handles = [
            sched.submit_generation(
                "chat",
                GenerationRequest(model_id="m1", prompt=f"{p}:{r}", max_tokens=40),
                lambda _: None,
                producer=f"person{p}",
            )
            for p in range(10)
            for r in range(5)
        ]
        await asyncio.gather(*handles)
    rounds: dict[str, int] = {}
    started_rounds = []
    for person in firsts:
        rounds[person] = rounds.get(person, 0) + 1
        started_rounds.append(rounds[person])
    assert len(firsts) == 50
    assert started_rounds == sorted(started_rounds)  # round 1 of all, then round 2...
