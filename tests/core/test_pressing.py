"""Pressing deadline work with deadlines on time (docs/design.md §4.8), on
TieredPolicy alone (sans-I/O): work presses ``grace_factor`` swaps before it
is due; on the person's own model it is neither kept out while the device
drains for another model's pressing work, nor cut by the chat latency guard
(§4.7). Each case is decided under both modes: the default shows what the
rule changes."""

from __future__ import annotations

import itertools

import pytest

from tierlm.core.classes import TaskClass, Tier, default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.device import Device
from tierlm.core.jobs import Job
from tierlm.core.tiered import TieredPolicy

CLASSES = default_classes()
SWAP = 10.0  # the device's swap estimate: work presses 3 x 10 s before it is due
ids = itertools.count(1)


def job(class_name: str, producer: str, model: str = "m1", deadline: float | None = None) -> Job:
    return Job(next(ids), CLASSES[class_name], model, producer, None, deadline, 0.0)


def policy(mode: str, weights: dict[str, float] | None = None) -> TieredPolicy:
    return TieredPolicy(CLASSES, SchedulerConfig(deadlines=mode, weights=weights or {}))


def started(p: TieredPolicy, now: float, device: Device) -> tuple[Job, ...]:
    """What ``p`` starts now, the shell's part done: each start leaves the queue."""
    decision = p.decide(now, device)
    return decision.start


@pytest.mark.parametrize("mode", ["on-time", "after-people"])
def test_the_loaded_models_pressing_work_is_not_kept_out_by_anothers_swap(mode: str) -> None:
    """Two cron jobs due at 100 s, one on the person's model (m1), one on m2;
    a deck producer's backlog on m1 comes first in the pool (its weight). At 80 s both
    press. The m2 job's swap waits for the device to drain, and nothing joins
    a draining batch: on the code trace, through a person's burst of chats,
    the m1 job waited 61 s past its deadline for a swap that was not its own.
    On time, the m1 job due as early takes the free slot first."""
    p = policy(mode, weights={"deck": 10.0})
    chat = job("chat", "alice")
    agents = [job("gana", f"agent{i}") for i in range(3)]
    for queued in (chat, *agents):
        p.submit(queued, 0.0)
    assert set(started(p, 0.0, Device("m1", slots=4, swap_estimate=SWAP))) == {chat, *agents}
    deck = job("gana", "deck")
    cron_m1 = job("gana", "gana:digest", deadline=100.0)
    cron_m2 = job("gana", "gana:translate", model="m2", deadline=100.0)
    for queued in (deck, cron_m2, cron_m1):
        p.submit(queued, 60.0)
    p.finished(agents[0], 80.0)
    running = (chat, *agents[1:])
    now_started = started(p, 80.0, Device("m1", slots=4, running=running, swap_estimate=SWAP))
    if mode == "on-time":
        assert now_started == (cron_m1,)
    else:  # the seed's order: the pool's turn; m2 waits for the person's gap
        assert now_started == (deck,)


def curve_with_room_for_two() -> tuple[float, ...]:
    """A step-time curve on which a person's sequence shares the batch with
    one other at most (``chat_slowdown`` 1.25)."""
    return (1.0, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7, 3.0)


def on_the_curve(*running: Job) -> Device:
    """8 slots on ``curve_with_room_for_two``, ``running`` decoding."""
    return Device(
        "m1",
        slots=8,
        running=running,
        swap_estimate=SWAP,
        step_cost=curve_with_room_for_two(),
        decoding=frozenset(job.id for job in running),
    )


def a_chat_beside(p: TieredPolicy, background: Job) -> Device:
    """``background`` starts at 0 s and a person's chat at 0.5 s: the device
    once the chat decodes, the two places the guard leaves both taken."""
    p.submit(background, 0.0)
    assert started(p, 0.0, on_the_curve()) == (background,)
    chat = job("chat", "alice")
    p.submit(chat, 0.5)
    assert started(p, 0.5, on_the_curve(background)) == (chat,)
    return on_the_curve(chat, background)


@pytest.mark.parametrize("mode", ["on-time", "after-people"])
def test_pressing_work_is_not_kept_out_by_the_chat_latency_guard(mode: str) -> None:
    """A person's chat (its prompt evaluated) and a pool job fill the two
    places the guard leaves; a cron job on the same model, due in 20 s,
    presses. By default the guard keeps it out for as long as the person's
    chat runs; on time it takes a free slot beside them."""
    p = policy(mode)
    running = a_chat_beside(p, job("gana", "deck"))
    cron = job("gana", "gana:digest", deadline=20.0)
    p.submit(cron, 1.0)
    assert started(p, 1.0, running) == ((cron,) if mode == "on-time" else ())


@pytest.mark.parametrize("mode", ["on-time", "after-people"])
def test_the_guard_cuts_other_background_not_pressing_work(mode: str) -> None:
    """A person's chat starts beside a pool job and a pressing cron job:
    while its prompt evaluates, the guard leaves it alone in the batch
    (``PROMPT_SLOWDOWN``). By default both background jobs stop; on time
    only the pool job does."""
    p = policy(mode)
    pool = job("gana", "deck")
    cron = job("gana", "gana:digest", deadline=20.0)
    p.submit(pool, 0.0)
    p.submit(cron, 0.0)
    assert set(started(p, 0.0, on_the_curve())) == {pool, cron}
    chat = job("chat", "alice")
    p.submit(chat, 1.0)
    decision = p.decide(1.0, on_the_curve(pool, cron))
    assert decision.start == (chat,)
    cut = [stopped for stopped, _reason in decision.stop]
    assert set(cut) == ({pool} if mode == "on-time" else {pool, cron}), decision.stop


@pytest.mark.parametrize("mode", ["on-time", "after-people"])
def test_pressing_work_behind_its_models_backlog_gets_its_swap(mode: str) -> None:
    """A cron job on m2 due at 100 s sits behind a deck backlog on m2 that
    the pool serves first. Seen only as m2's best job, it never pressed: the
    deck hid it, lead and all. On time, it gets its swap at 80 s."""
    p = policy(mode, weights={"deck": 10.0})
    agents = [job("gana", "agent") for _ in range(3)]
    deck = [job("gana", "deck", model="m2") for _ in range(3)]
    for queued in (*agents, *deck):
        p.submit(queued, 0.0)
    cron = job("gana", "gana:translate", model="m2", deadline=100.0)
    p.submit(cron, 60.0)
    now_started = started(p, 80.0, Device("m1", swap_estimate=SWAP))
    assert now_started == ((cron,) if mode == "on-time" else (agents[0],))


def test_a_running_pressing_job_keeps_its_slot_from_a_later_one_elsewhere() -> None:
    """A cron job on m1 due at 100 s runs past its slice beside a deck backlog;
    an m2 cron job due at 105 s presses too. The m1 job was told to yield for
    the m2 swap: the earlier deadline lost its place and paid a swap."""
    p = policy("on-time", weights={"deck": 10.0})
    cron = job("gana", "gana:digest", deadline=100.0)
    p.submit(cron, 70.0)
    assert started(p, 72.0, Device("m1", swap_estimate=SWAP)) == (cron,)
    for queued in [job("gana", "deck") for _ in range(3)]:
        p.submit(queued, 73.0)
    p.submit(job("gana", "gana:translate", model="m2", deadline=105.0), 73.0)
    running = Device("m1", running=(cron,), swap_estimate=SWAP, decoding=frozenset({cron.id}))
    decision = p.decide(85.0, running)
    assert decision.stop == () and decision.start == ()


def test_the_policy_wakes_when_work_starts_to_press() -> None:
    """A cron job due at 200 s, kept out by the chat latency guard beside a
    person's chat: the policy asks to be woken at 170 s, when it presses,
    and then gives it a slot (else it waited for an unrelated event)."""
    p = policy("on-time")
    both = a_chat_beside(p, job("extract", "x"))
    cron = job("gana", "gana:digest", deadline=200.0)
    p.submit(cron, 1.0)
    decision = p.decide(1.0, both)
    assert decision.start == ()
    assert decision.wake_at == 200.0 - 3 * SWAP
    assert started(p, 170.0, both) == (cron,)


@pytest.mark.parametrize("mode", ["on-time", "after-people"])
def test_work_never_due_is_not_overdue(mode: str) -> None:
    """docs/design.md §4.8: an operator's tier-3 class without a deadline
    (``report``) and an overdue cron job wait on two other models while the
    person who just chatted may type again on m1. Read as due at 0, the
    report job was "overdue first" and took its swap at once, on time; it is
    never due: on time the overdue job goes at once, by default both wait
    for the hold (30 s: ``grace_factor`` swaps), then the overdue job first."""
    classes = {**CLASSES, "report": TaskClass("report", Tier.T3)}
    p = TieredPolicy(classes, SchedulerConfig(deadlines=mode))
    chat = Job(next(ids), classes["chat"], "m1", "alice", None, None, 0.0)
    p.submit(chat, 0.0)
    assert started(p, 0.0, Device("m1", swap_estimate=SWAP)) == (chat,)
    p.finished(chat, 1.0)
    report = Job(next(ids), classes["report"], "m3", "reports", None, None, 1.0)
    cron = Job(next(ids), classes["gana"], "m2", "gana:cron", None, 0.5, 1.0)
    p.submit(report, 1.0)
    if mode == "on-time":  # alone, work never due waits as in the default
        assert started(p, 1.0, Device("m1", swap_estimate=SWAP)) == ()
    p.submit(cron, 1.0)
    if mode == "after-people":
        assert started(p, 30.5, Device("m1", swap_estimate=SWAP)) == ()
    first = 1.0 if mode == "on-time" else 31.0
    assert started(p, first, Device("m1", swap_estimate=SWAP)) == (cron,)
