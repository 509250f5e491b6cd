"""Journal replay for closure jobs (docs/design.md §4.9), in virtual time on the simulated device
(20 tokens/s).

The runner is wrapped to count the tokens it really generates, per prompt, so
the tests see what the device did, not only what the job returned.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.helpers import TOKEN, runner
from tests.payloads import MESSAGES
from tierlm import (
    Cancelled,
    CancelReason,
    JobContext,
    Scheduler,
    SchedulerConfig,
)
from tierlm.runners import CancelToken, GenerationRequest, SimulatedRunner
from tierlm.runners.protocol import Abilities
from tierlm.shell.journal import CALL_BYTES, Journal, JournalBudget, piece_bytes
from tierlm.testing import run_virtual

STEP_TOKENS = 40
NO_JOURNAL = SchedulerConfig(journal_bytes_per_job=0)


class CountingRunner:
    """A SimulatedRunner that counts the pieces its ``generate`` yields, per
    prompt (the background's calls; the chats, which send messages, are not
    counted)."""

    def __init__(self, inner: SimulatedRunner) -> None:
        self.inner = inner
        self.tokens: Counter[str] = Counter()
        self.calls = 0

    @property
    def loaded_model(self) -> str | None:
        return self.inner.loaded_model

    @property
    def abilities(self) -> Abilities:
        return self.inner.abilities

    async def load(self, model_id: str) -> None:
        await self.inner.load(model_id)

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        prompt = request.prompt
        if prompt is not None:
            self.calls += 1
        async for piece in self.inner.generate(request, cancel):
            if prompt is not None:
                self.tokens[prompt] += 1
            yield piece

    def per_step(self) -> list[int]:
        return [n for _prompt, n in sorted(self.tokens.items())]


def agent_round(
    prompt: Callable[[int, str, JobContext], str] = lambda step, last, _ctx: f"{step}:{last}",
) -> Callable[[JobContext], Awaitable[list[str]]]:
    """An agent round: three ``ctx.generate`` calls, each prompt built from the
    previous answer (as an agent feeds a tool result back)."""

    async def work(ctx: JobContext) -> list[str]:
        answers: list[str] = []
        for step in range(3):
            last = answers[-1] if answers else "start"
            stream = ctx.generate(prompt=prompt(step, last, ctx), max_tokens=STEP_TOKENS)
            answers.append("".join([piece async for piece in stream]))
        return answers

    return work


async def chat_at(sched: Scheduler, when: float) -> None:
    """A person's chat arriving at ``when``: it preempts the running background job."""
    await asyncio.sleep(when - sched.now())
    async for _ in sched.generate("chat", "m1", MESSAGES, max_tokens=5):
        pass


# The third call starts at 80 tokens (4.0 s); the chat lands inside its 16th token.
INSIDE_THIRD_CALL = (2 * STEP_TOKENS + 15.6) * TOKEN


async def run_round(
    config: SchedulerConfig | None, chat: float | None, work: Callable[..., Awaitable[list[str]]]
) -> tuple[list[str], CountingRunner, int]:
    device = CountingRunner(runner())
    async with Scheduler(device, config=config) as sched:
        handle = sched.submit("gana", "m1", work)
        if chat is not None:
            await chat_at(sched, chat)
        answers = await handle
        assert sched.snapshot().journal_bytes == 0  # dropped when the job ended
        return answers, device, sched.stats.preemptions


def test_a_preempted_agent_round_generates_each_call_once() -> None:
    """The issue's measured case: three 40-token calls, preempted during the
    third. Without a journal the device generated 80 + 80 + 56 tokens; with
    one, 40 + 40 + 40, and the round's answers are the uninterrupted ones."""
    reference, plain, _ = run_virtual(run_round(None, None, agent_round()))
    assert plain.per_step() == [STEP_TOKENS] * 3

    answers, device, preemptions = run_virtual(run_round(None, INSIDE_THIRD_CALL, agent_round()))
    assert preemptions == 1
    assert answers == reference
    assert device.per_step() == [40, 40, 40]
    # Replay costs no runner call: 3 calls, then only the resumed third.
    assert device.calls == 4

    answers, device, preemptions = run_virtual(
        run_round(NO_JOURNAL, INSIDE_THIRD_CALL, agent_round())
    )
    assert preemptions == 1
    assert answers == reference
    assert device.per_step() == [80, 80, 56]
    assert device.calls == 6


async def test_a_work_that_diverges_generates_live_from_there_on() -> None:
    """The second prompt depends on the attempt: the first call is replayed,
    the second differs and is generated live, and so is the third (the rest of
    the journal was dropped), from its start, not from the recorded partial."""

    def prompt(step: int, last: str, ctx: JobContext) -> str:
        return f"{step}:attempt {ctx.attempt}" if step == 1 else f"{step}:{last}"

    answers, device, _ = await run_round(None, INSIDE_THIRD_CALL, agent_round(prompt))
    assert device.tokens == {
        "0:start": 40,
        "1:attempt 1": 40,
        "1:attempt 2": 40,
        f"2:{answers[1]}": 16 + 40,
    }
    assert answers == ["".join(f"w{i} " for i in range(40))] * 3


async def test_cancel_during_replay_stops_the_job_without_the_runner() -> None:
    """The work reads its replayed first call slowly (a tool per piece); the
    caller cancels while it replays: the job ends cancelled at the next piece,
    and the device generates nothing on that run."""
    read: list[int] = []

    async def slow_reader(ctx: JobContext) -> None:
        pieces = 0
        async for _ in ctx.generate(prompt="slow", max_tokens=STEP_TOKENS):
            pieces += 1
            await asyncio.sleep(0.1)  # a tool's work per piece, between tokens
        read.append(pieces)
        async for _ in ctx.generate(prompt="second", max_tokens=STEP_TOKENS):
            pass

    device = CountingRunner(runner())
    async with Scheduler(device) as sched:
        handle = sched.submit("gana", "m1", slow_reader)
        # Call 1 takes 40 x 0.15 s = 6 s; preempt inside call 2.
        await chat_at(sched, 6.5)
        generated = device.calls, sum(device.tokens.values())
        await asyncio.sleep(1.0)  # the second run is replaying call 1
        assert sched.snapshot().running is not None
        assert handle.cancel()
        with pytest.raises(Cancelled) as info:
            await handle
        assert info.value.reason is CancelReason.CALLER
        assert (device.calls, sum(device.tokens.values())) == generated
        assert read == [40]  # the replay did not reach the end of call 1
        assert sched.snapshot().journal_bytes == 0


async def test_a_work_that_raises_during_replay_fails_only_its_job() -> None:
    async def fails_on_rerun(ctx: JobContext) -> None:
        async for _ in ctx.generate(prompt="first", max_tokens=STEP_TOKENS):
            if ctx.attempt == 2:
                raise ValueError("the tool rejected the replayed answer")
        async for _ in ctx.generate(prompt="second", max_tokens=STEP_TOKENS):
            pass

    device = CountingRunner(runner())
    async with Scheduler(device) as sched:
        failing = sched.submit("gana", "m1", fails_on_rerun, producer="gana:a")
        other = sched.submit("gana", "m1", agent_round(), producer="gana:b")
        await chat_at(sched, 3.0)  # inside the failing job's second call
        with pytest.raises(ValueError, match="rejected the replayed answer"):
            await failing
        assert len(await other) == 3
        assert device.tokens["first"] == STEP_TOKENS  # replayed, not regenerated
        assert (sched.stats.failed, sched.stats.completed) == (1, 2)
        assert sched.snapshot().journal_bytes == 0


def test_past_its_bound_a_job_still_gives_the_same_answers() -> None:
    """A per-job bound that holds the first call and a part of the second: the
    first is replayed, the second replays what was kept and resumes live, the
    third is generated again; the answers are the uninterrupted ones."""
    piece = piece_bytes("w10 ")
    bound = 2 * CALL_BYTES + (STEP_TOKENS + 10) * piece
    reference, _, _ = run_virtual(run_round(None, None, agent_round()))
    answers, device, _ = run_virtual(
        run_round(SchedulerConfig(journal_bytes_per_job=bound), INSIDE_THIRD_CALL, agent_round())
    )
    assert answers == reference
    first, second, third = device.per_step()
    assert first == 40
    assert 40 + 28 <= second <= 40 + 30  # resumed after the 10 or so pieces it kept
    assert third == 16 + 40


def test_journal_bounds_per_job_and_in_total() -> None:
    budget = JournalBudget(per_job=10 * 64, total=15 * 64)
    a, b = Journal(budget), Journal(budget)
    request = GenerationRequest("m", prompt="p", max_tokens=100)
    for journal in (a, b):
        journal.start_run()
        record = journal.open(request)
        for i in range(100):
            journal.add(record, f"w{i} ")
        assert record.cut  # did not fit: a prefix is kept
        assert journal.bytes <= budget.per_job
    assert budget.used <= budget.total
    assert a.bytes + b.bytes == budget.used
    # The kept prefixes are the first pieces, in order.
    a.start_run()
    kept = a.open(request).pieces
    assert kept == [f"w{i} " for i in range(len(kept))]
    assert kept
    a.clear()
    b.clear()
    assert budget.used == 0


async def test_many_preempted_jobs_stay_within_the_total_bound() -> None:
    total = 6 * 1024

    config = SchedulerConfig(journal_bytes_total=total)
    async with Scheduler(runner(), config=config) as sched:
        seen: list[int] = []
        sched.add_listener(lambda _event: seen.append(sched.snapshot().journal_bytes))
        rounds = [sched.submit("gana", "m1", agent_round(), producer=f"gana:{i}") for i in range(8)]
        for when in (1.0, 3.5, 6.0, 8.5, 11.0, 13.5):
            await chat_at(sched, when)
        answers = await asyncio.gather(*rounds)
        assert max(seen) <= total
        assert max(seen) > total // 2  # the bound was reached, not idle
        assert sched.stats.requeues >= 6
        expected = ["".join(f"w{i} " for i in range(40))] * 3
        assert all(a == expected for a in answers)
        assert sched.snapshot().journal_bytes == 0


@pytest.mark.parametrize("resume", ["re-evaluate", "restore"])
async def test_a_round_past_its_journal_bound_still_finishes_between_slices(resume: str) -> None:
    """docs/design.md §4.6 (a slice worth its resume), for closure jobs: with no
    journal a resumed round generates its calls again, so a 6 s round cut at
    every 3 s slice redid its 3 s and was cut again, and never finished. The
    run's redo counts as what its resume costs (time until it passes what its
    earlier runs produced): its slice stretches and each turn gains ground."""
    rounds = 2

    device = CountingRunner(runner(resume=resume))
    config = SchedulerConfig(journal_bytes_per_job=0, slice=3.0)
    async with Scheduler(device, config=config) as sched:
        handles = [
            sched.submit("gana", "m1", agent_round(), producer=f"gana:{i}") for i in range(rounds)
        ]
        # Bounded in virtual time: before the rule the rounds never ended.
        answers = await asyncio.wait_for(asyncio.gather(*handles), timeout=600.0)
        answers, tokens, ended = answers, device.tokens, sched.now()
    expected = ["".join(f"w{i} " for i in range(STEP_TOKENS))] * 3
    assert answers == [expected] * rounds
    # Each round's 120 tokens, plus at most one redo of a turn's work each.
    assert sum(tokens.values()) <= rounds * 3 * STEP_TOKENS * 2
    assert ended < 60.0  # 12 s of work; the redo adds less than as much again
