"""The two kinds of preemption (docs/design.md §4.6), in virtual time.

Only a person waiting (T0 or T1 work: a chat, the foreground) may cut a
prompt evaluation short: it is aborted at once. Every other preemption (a
slice used, the pool floor, overdue work, any tier below T1) is a YIELD: the
job finishes the evaluation under way, produces its first token, and stops at
that boundary. A yield that a person's preemption follows is cut short at
once; a caller's cancel and shutdown stop at once, as before.

The device evaluates a prompt token in 10 ms and makes a token in 50 ms; the
background jobs' prompts take 10 s to evaluate, longer than a 4 s slice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from tests.helpers import TOKEN, Recorder
from tests.payloads import MESSAGES
from tierlm import (
    Cancelled,
    CancelReason,
    CancelToken,
    JobContext,
    Preempting,
    Scheduler,
    SchedulerConfig,
    TaskClass,
)
from tierlm.core import default_classes
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.runners.simulated import SimulatedCall, SimulatedOutcome

PREFILL = 0.01  # seconds a prompt token: 100 tokens/s
LONG = 1000  # prompt tokens: 10 s of evaluation, longer than a slice
EVALUATION = LONG * PREFILL
SLICE = SchedulerConfig(slice=4.0)
"""The instants below (a slice ending at 4 s, a chat or a foreground change at
3 s inside it) are laid out around a 4 s slice, pinned here."""


class Device:
    """A simulated device with prompt evaluation, and every call it made."""

    def __init__(self, resume: str = "restore") -> None:
        self.runner = SimulatedRunner(
            token_interval=TOKEN,
            prefill_per_token=PREFILL,
            initial_model="m1",
            resume="restore" if resume == "restore" else "re-evaluate",
        )
        self.calls: list[tuple[float, SimulatedCall]] = []
        self.runner.on_call = self._on_call

    def _on_call(self, call: SimulatedCall) -> None:
        self.calls.append((asyncio.get_running_loop().time(), call))

    def of(self, prompt: str) -> list[SimulatedCall]:
        return [call for _, call in self.calls if call.request.prompt == prompt]


def background(name: str, tokens: int = 200, prompt_tokens: int = LONG) -> GenerationRequest:
    return GenerationRequest("m1", prompt=name, max_tokens=tokens, prompt_tokens=prompt_tokens)


def ignore(_piece: str) -> None:
    return None


async def scenario(
    body: Callable[[Scheduler, Device, Recorder], Coroutine[Any, Any, None]],
    classes: list[TaskClass] | None = None,
) -> None:
    device = Device()
    async with Scheduler(device.runner, classes=classes, config=SLICE) as sched:
        await body(sched, device, Recorder.attach(sched))


def yielded_after_its_evaluation(device: Device, rec: Recorder, prompt: str, job_id: int) -> None:
    """The job's first run evaluated its whole prompt, produced one token and
    went back to the queue; its next run restored that and went on."""
    first, *rest = device.of(prompt)
    assert first.ready == "fresh" and first.prompt_seconds == pytest.approx(EVALUATION)
    assert first.tokens == 1 and first.stopped
    run = next(r for r in rec.runs if r.job_id == job_id)
    assert run.how == "requeued"
    assert run.end == pytest.approx(run.start + EVALUATION + TOKEN)
    if rest:
        assert rest[0].ready == "restore"  # nothing evaluated again


# -- yields: fairness never cuts an evaluation -----------------------------------


async def test_a_slice_yields_after_the_first_token_not_in_the_evaluation() -> None:
    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        a = sched.submit_generation("gana", background("a"), ignore, producer="a")
        sched.submit_generation("gana", background("b", prompt_tokens=10), ignore, producer="b")
        await asyncio.sleep(EVALUATION + 1)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.job.id == a.id and preempting.reason is CancelReason.YIELD
        assert preempting.time == pytest.approx(4.0)  # its slice ended mid-evaluation
        yielded_after_its_evaluation(device, rec, "a", a.id)
        assert rec.runs[1].start == pytest.approx(EVALUATION + TOKEN)  # then b's turn

    await scenario(body)


async def test_the_pool_floor_yields_after_the_first_token() -> None:
    """Overdue work of a T3 class runs first; the pool (backlogged) is owed
    its floor within the first half second: the overdue job yields, but only
    once its evaluation is done."""

    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        cron = sched.submit_generation("cron", background("cron"), ignore, producer="cron")
        sched.submit_generation("nataraj", background("deck", prompt_tokens=10), ignore)
        await asyncio.sleep(EVALUATION + 1)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.job.id == cron.id and preempting.reason is CancelReason.YIELD
        assert preempting.time < 1.0
        yielded_after_its_evaluation(device, rec, "cron", cron.id)
        assert rec.runs[1].class_name == "nataraj"

    await scenario(body, [*default_classes().values(), TaskClass("cron", tier=3)])


@pytest.mark.parametrize(
    ("class_name", "deadline"),
    [("gana", -1.0), ("report", None)],
    ids=["overdue T3 work", "a T2 class without a budget"],
)
async def test_a_higher_tier_below_a_person_yields_after_the_first_token(
    class_name: str, deadline: float | None
) -> None:
    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        deck = sched.submit_generation("nataraj", background("deck"), ignore, producer="deck")
        await asyncio.sleep(1)
        due = None if deadline is None else sched.now() + deadline
        work = background("work", prompt_tokens=10)
        sched.submit_generation(class_name, work, ignore, producer="cron", deadline=due)
        await asyncio.sleep(EVALUATION)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.job.id == deck.id and preempting.reason is CancelReason.YIELD
        assert preempting.time == pytest.approx(1.0)
        yielded_after_its_evaluation(device, rec, "deck", deck.id)
        assert rec.runs[1].class_name == class_name

    await scenario(body, [*default_classes().values(), TaskClass("report", tier=2)])


async def test_a_job_that_is_not_re_queued_ends_as_preempted_after_a_yield() -> None:
    """Its caller is told "preempted", whichever kind stopped it (the gateway
    answers 503 with Retry-After for it)."""

    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        once = sched.submit_generation("once", background("once"), ignore)
        await asyncio.sleep(1)
        sched.submit_generation("report", background("r", prompt_tokens=10), ignore)
        with pytest.raises(Cancelled) as caught:
            await once
        assert caught.value.reason is CancelReason.PREEMPTED
        assert rec.kinds(Preempting)[0].reason is CancelReason.YIELD
        assert device.of("once")[0].tokens == 1  # it finished its evaluation first

    await scenario(
        body,
        [
            *default_classes().values(),
            TaskClass("report", tier=2),
            TaskClass("once", tier=3, requeue=False),
        ],
    )


# -- a person waiting cuts the evaluation at once ----------------------------------


def cut_at(device: Device, rec: Recorder, prompt: str, job_id: int, when: float) -> None:
    """The job's run stopped at ``when``, in its evaluation, with no token."""
    first = device.of(prompt)[0]
    assert first.tokens == 0 and first.stopped and first.first_token_at is None
    assert first.prompt_seconds == pytest.approx(when)
    run = next(r for r in rec.runs if r.job_id == job_id)
    assert run.end == pytest.approx(when)


async def test_a_chat_aborts_an_evaluation_at_once() -> None:
    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        deck = sched.submit_generation("nataraj", background("deck"), ignore, producer="deck")
        await asyncio.sleep(3)
        chat = sched.submit_generation("chat", GenerationRequest("m1", messages=MESSAGES), ignore)
        await asyncio.sleep(1)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.reason is CancelReason.PREEMPTED and preempting.time == 3.0
        cut_at(device, rec, "deck", deck.id, 3.0)
        assert rec.starts(chat.id) == [3.0]

    await scenario(body)


async def test_the_foreground_aborts_an_evaluation_at_once() -> None:
    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        gana = sched.submit_generation("gana", background("gana"), ignore, producer="g")
        card = background("card", prompt_tokens=10)
        opened = sched.submit_generation("nataraj", card, ignore, producer="deck", subject=7)
        await asyncio.sleep(3)
        sched.set_foreground("nataraj", subject=7)  # the person opens card 7
        await asyncio.sleep(1)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.reason is CancelReason.PREEMPTED and preempting.time == 3.0
        cut_at(device, rec, "gana", gana.id, 3.0)
        assert rec.starts(opened.id) == [3.0]

    await scenario(body)


async def test_a_yield_under_way_is_cut_short_by_a_chat() -> None:
    """The slice asks the job to yield at 4 s, in its evaluation; a chat at
    6 s cuts the evaluation there. One preemption, counted once."""

    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        a = sched.submit_generation("gana", background("a"), ignore, producer="a")
        sched.submit_generation("gana", background("b", prompt_tokens=10), ignore, producer="b")
        await asyncio.sleep(6)
        chat = sched.submit_generation("chat", GenerationRequest("m1", messages=MESSAGES), ignore)
        await asyncio.sleep(1)
        (preempting,) = rec.kinds(Preempting)
        assert preempting.reason is CancelReason.YIELD and preempting.time == pytest.approx(4.0)
        cut_at(device, rec, "a", a.id, 6.0)
        assert rec.runs[0].how == "requeued"
        assert rec.starts(chat.id) == [6.0]
        assert sched.stats.preemptions == 1

    await scenario(body)


# -- a caller's cancel and shutdown stop at once ------------------------------------


@pytest.mark.parametrize("yielding", [False, True], ids=["running", "yielding"])
async def test_a_callers_cancel_stops_an_evaluation_at_once(yielding: bool) -> None:
    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        a = sched.submit_generation("gana", background("a"), ignore, producer="a")
        if yielding:  # a peer: the slice asks a to yield at 4 s
            sched.submit_generation("gana", background("b", prompt_tokens=10), ignore, "b")
        await asyncio.sleep(6)
        assert a.cancel()
        with pytest.raises(Cancelled) as caught:
            await a
        assert caught.value.reason is CancelReason.CALLER  # not re-queued
        cut_at(device, rec, "a", a.id, 6.0)
        assert rec.runs[0].how == "cancelled"

    await scenario(body)


async def test_shutdown_stops_an_evaluation_at_once() -> None:
    device = Device()
    sched = Scheduler(device.runner)
    async with sched:
        a = sched.submit_generation("gana", background("a"), ignore, producer="a")
        await asyncio.sleep(3)
    assert sched.now() == 3.0
    with pytest.raises(Cancelled) as caught:
        await a
    assert caught.value.reason is CancelReason.SHUTDOWN
    assert device.of("a")[0].tokens == 0


async def test_pause_stops_an_evaluation_at_once() -> None:
    """``pause()``: the app leaves the device to its other user (seed scenario
    8); the running job is stopped at once, as for a person."""

    async def body(sched: Scheduler, device: Device, rec: Recorder) -> None:
        a = sched.submit_generation("gana", background("a"), ignore, producer="a")
        await asyncio.sleep(3)
        await sched.pause()
        assert sched.now() == 3.0
        (preempting,) = rec.kinds(Preempting)
        assert preempting.reason is CancelReason.PREEMPTED
        cut_at(device, rec, "a", a.id, 3.0)
        sched.resume()
        assert await a  # resumed, and finished

    await scenario(body)


# -- the simulated device: what a yield and a cut leave (docs/design.md §8) ---------


async def _run_once(
    runner: SimulatedRunner, request: GenerationRequest, token: CancelToken, how: str
) -> int:
    """One call as ``how`` ("per token", "batched", "complete"); its token count."""
    if how == "complete":
        return (await runner.complete(request, token)).tokens
    runner.per_token = how == "per token"
    return len([piece async for piece in runner.generate(request, token)])


@pytest.mark.parametrize("how", ["per token", "batched", "complete"])
async def test_the_simulated_device_yields_after_one_token_and_keeps_finished_batches(
    how: str,
) -> None:
    """1 500 prompt tokens (15 s). A yield at 5 s: the evaluation finishes, one
    token, stop. A preemption at 11 s: 1 100 tokens done, two 512-token
    batches kept, and the resume restores them and evaluates the other 476."""

    loop = asyncio.get_running_loop()
    calls: list[SimulatedCall] = []
    runner = SimulatedRunner(
        token_interval=TOKEN, prefill_per_token=PREFILL, initial_model="m1", resume="restore"
    )
    runner.on_call = calls.append
    yielding = CancelToken()
    loop.call_later(5.0, yielding.cancel, CancelReason.YIELD)
    request = background("y", prompt_tokens=1500)
    assert await _run_once(runner, request, yielding, how) == 1
    assert loop.time() == pytest.approx(15.0 + TOKEN)

    start = loop.time()
    cut = CancelToken()
    loop.call_later(11.0, cut.cancel, CancelReason.PREEMPTED)
    request = background("p", prompt_tokens=1500)
    assert await _run_once(runner, request, cut, how) == 0
    assert loop.time() - start == pytest.approx(11.0)
    assert calls[-1].kept_seconds == pytest.approx(1024 * PREFILL)
    start = loop.time()
    assert await _run_once(runner, request, CancelToken(), how) == 200
    resumed = calls[-1]
    assert resumed.ready == "restore"
    assert resumed.prompt_seconds == pytest.approx(runner.restore_seconds + 476 * PREFILL)
    assert resumed.resume_seconds == pytest.approx(runner.restore_seconds)


async def test_a_device_without_snapshots_loses_a_cut_evaluation() -> None:
    loop = asyncio.get_running_loop()
    calls: list[SimulatedCall] = []
    runner = SimulatedRunner(TOKEN, PREFILL, initial_model="m1")  # no snapshots
    runner.on_call = calls.append
    cut = CancelToken()
    loop.call_later(11.0, cut.cancel, CancelReason.PREEMPTED)
    request = background("p", prompt_tokens=1500)
    assert await runner.complete(request, cut) == SimulatedOutcome(0, None, 11.0, True)
    assert calls[-1].kept_seconds == 0.0
    await runner.complete(request, CancelToken())
    assert calls[-1].ready == "fresh" and calls[-1].prompt_seconds == pytest.approx(15.0)


async def test_kept_batches_whose_state_was_evicted_are_evaluated_again_as_waste() -> None:
    """The pool holds 1 100 tokens of state: a second cut evaluation evicts
    the first one's; its resume evaluates everything, and the 1 024 tokens it
    had kept count as work redone (docs/design.md §8.4)."""

    loop = asyncio.get_running_loop()
    calls: list[SimulatedCall] = []
    runner = SimulatedRunner(
        TOKEN, PREFILL, initial_model="m1", resume="restore",
        kv_bytes_per_token=1000, snapshot_pool_bytes=1_100_000,
    )  # fmt: skip
    runner.on_call = calls.append
    for name in ("p", "q"):
        cut = CancelToken()
        loop.call_later(11.0, cut.cancel, CancelReason.PREEMPTED)
        await runner.complete(background(name, prompt_tokens=1500), cut)
        assert calls[-1].kept_seconds == pytest.approx(1024 * PREFILL)
    await runner.complete(background("p", prompt_tokens=1500), CancelToken())
    again = calls[-1]
    assert again.ready == "re-evaluate" and again.prompt_seconds == pytest.approx(15.0)
    assert again.resume_seconds == pytest.approx(1024 * PREFILL)


async def test_work_that_drives_the_runner_itself_is_never_cut_by_a_slice() -> None:
    """A work function that uses ``ctx.runner`` directly is not replayed from a
    journal: preempted, it starts over. Cut at every slice it could never
    finish (two such producers with jobs longer than a slice would take turns
    forever), so the pool's fairness leaves it alone; a higher tier still
    preempts it (docs/design.md §4.6)."""
    tokens = round(6.0 / TOKEN)  # 6 s of decoding: longer than the 4 s slice

    async def direct(ctx: JobContext) -> int:
        sim = cast("SimulatedRunner", ctx.runner)
        request = GenerationRequest(ctx.model_id, prompt="x", max_tokens=tokens, prompt_tokens=1)
        outcome = await sim.complete(request, ctx.cancel)
        ctx.checkpoint()
        return outcome.tokens

    async with Scheduler(SimulatedRunner(token_interval=TOKEN, initial_model="m1")) as sched:
        rec = Recorder.attach(sched)
        handles = [
            sched.submit("gana", "m1", direct, producer=producer)
            for _round in range(3)
            for producer in ("a", "b")
        ]
        # 36 s of work; cut at every slice it would never end (virtual time).
        done = await asyncio.wait_for(asyncio.gather(*handles), timeout=300)
        assert done == [tokens] * 6
        assert sched.stats.preemptions == 0
        assert all(len(rec.starts(h.id)) == 1 for h in handles)
        # A higher tier still preempts it.
        busy = sched.submit("gana", "m1", direct, producer="a")
        await asyncio.sleep(1.0)
        text = [piece async for piece in sched.generate("chat", "m1", MESSAGES, max_tokens=3)]
        assert len(text) == 3
        assert await busy == tokens and len(rec.starts(busy.id)) == 2
