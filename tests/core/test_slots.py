"""The k-slot rules of docs/design.md §4.7, on TieredPolicy alone (sans-I/O):
the shell's part is played by hand, time is an argument."""

from __future__ import annotations

import itertools

from tierlm.core.classes import default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.device import Device
from tierlm.core.jobs import Job
from tierlm.core.slots import guard_cap
from tierlm.core.stop_reasons import CancelReason
from tierlm.core.tiered import TieredPolicy

CLASSES = default_classes()
ids = itertools.count(1)


def job(class_name: str, model: str = "m1", producer: str = "p") -> Job:
    return Job(next(ids), CLASSES[class_name], model, producer, None, None, 0.0)


def policy() -> TieredPolicy:
    return TieredPolicy(CLASSES, SchedulerConfig())


def test_free_slots_fill_best_first_on_the_loaded_model() -> None:
    p = policy()
    jobs = [job("nataraj", producer=f"agent{i}") for i in range(6)]
    for j in jobs:
        p.submit(j, 0.0)
    decision = p.decide(0.0, Device("m1", slots=4))
    assert len(decision.start) == 4
    assert {j.model_id for j in decision.start} == {"m1"}
    assert len(p) == 2


def test_one_slot_starts_one_job() -> None:
    p = policy()
    for i in range(3):
        p.submit(job("nataraj", producer=f"a{i}"), 0.0)
    assert len(p.decide(0.0, Device("m1")).start) == 1


def test_a_job_on_another_model_waits_for_an_empty_device_and_nothing_joins_meanwhile() -> None:
    """A swap empties every slot: while the device drains to it, no new
    sequence of the old model joins the batch."""
    p = policy()
    running = job("extract", "m1")
    p.submit(running, 0.0)
    first = p.decide(0.0, Device("m1", slots=4))
    assert first.start == (running,)
    chat = job("chat", "m2")
    p.submit(chat, 1.0)
    later = job("extract", "m1")
    p.submit(later, 1.0)
    decision = p.decide(1.0, Device("m1", slots=4, running=(running,)))
    assert chat not in decision.start and later not in decision.start
    assert decision.stop == ((running, CancelReason.PREEMPTED),)
    # Once the device is empty, the chat starts alone (its swap).
    p.finished(running, 1.1)
    p.requeue(running, 1.1)
    decision = p.decide(1.1, Device("m1", slots=4))
    assert decision.start == (chat,)


def test_a_person_takes_a_free_slot_without_stopping_anyone() -> None:
    p = policy()
    background = [job("nataraj", producer=f"a{i}") for i in range(2)]
    for j in background:
        p.submit(j, 0.0)
    started = p.decide(0.0, Device("m1", slots=4)).start
    chat = job("chat")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, Device("m1", slots=4, running=started))
    assert decision.start == (chat,)
    assert decision.stop == ()


def test_a_person_on_a_full_device_stops_one_sequence_the_lowest_ranked() -> None:
    p = policy()
    extract = job("extract")
    pool = [job("nataraj", producer=f"a{i}") for i in range(3)]
    for j in (extract, *pool):
        p.submit(j, 0.0)
    started = p.decide(0.0, Device("m1", slots=4)).start
    assert len(started) == 4
    chat = job("chat")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, Device("m1", slots=4, running=started))
    assert decision.start == ()
    assert len(decision.stop) == 1
    stopped, how = decision.stop[0]
    assert how is CancelReason.PREEMPTED
    assert stopped in pool  # T4 before T2: the lowest-ranked goes
    # While that stop is under way, no second sequence is stopped for the same chat.
    again = p.decide(1.0, Device("m1", 4, started, {stopped.id: CancelReason.PREEMPTED}))
    assert again.stop == ()


def test_the_chat_latency_guard_cuts_the_batch_around_a_person() -> None:
    """Step cost 1 + 0.2 (n - 1): while the chat's prompt evaluates (within
    PROMPT_SLOWDOWN, 1.05) it runs alone, the others stopped at once; from its
    first token (chat_slowdown 1.25) it shares the device with one more."""
    curve = tuple(1 + 0.2 * (n - 1) for n in range(1, 5))
    assert guard_cap(curve, 1.25, 4) == 2
    assert guard_cap(curve, 1.05, 4) == 1
    p = policy()
    pool = [job("nataraj", producer=f"a{i}") for i in range(3)]
    for j in pool:
        p.submit(j, 0.0)
    started = p.decide(0.0, Device("m1", slots=4, step_cost=curve)).start
    assert len(started) == 3
    chat = job("chat")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, Device("m1", slots=4, running=started, step_cost=curve))
    assert decision.start == (chat,)
    assert len(decision.stop) == 3
    assert {how for _job, how in decision.stop} == {CancelReason.PREEMPTED}
    # Its first token: one background sequence may rejoin beside it.
    for stopped, _how in decision.stop:
        p.finished(stopped, 1.1)
        p.requeue(stopped, 1.1)
    decoding = Device(
        "m1", slots=4, running=(chat,), step_cost=curve, decoding=frozenset({chat.id})
    )
    rejoined = p.decide(1.2, decoding)
    assert len(rejoined.start) == 1 and rejoined.stop == ()
    assert (
        p.decide(
            1.2,
            Device(
                "m1", 4, (chat, *rejoined.start), step_cost=curve, decoding=frozenset({chat.id})
            ),
        ).start
        == ()
    )


def test_on_a_flat_curve_nothing_is_paused_for_a_person() -> None:
    curve = (1.0, 1.0, 1.0, 1.0)
    p = policy()
    pool = [job("nataraj", producer=f"a{i}") for i in range(3)]
    for j in pool:
        p.submit(j, 0.0)
    started = p.decide(0.0, Device("m1", slots=4, step_cost=curve)).start
    chat = job("chat")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, Device("m1", slots=4, running=started, step_cost=curve))
    assert decision.start == (chat,) and decision.stop == ()


def test_a_yield_under_way_is_cut_short_when_a_person_needs_its_slot() -> None:
    p = policy()
    pool = job("nataraj")
    p.submit(pool, 0.0)
    (started,) = p.decide(0.0, Device("m1")).start
    chat = job("chat")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, Device("m1", 1, (started,), {started.id: CancelReason.YIELD}))
    assert decision.stop == ((started, CancelReason.PREEMPTED),)
