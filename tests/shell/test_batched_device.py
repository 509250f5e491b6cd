"""A batched device through the real Scheduler, in virtual time
(docs/design.md §2.3, §4.7): counts of tokens and steps, never wall time."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import cast

from tierlm import (
    JobContext,
    JobStarted,
    Preempting,
    RunEnded,
    Scheduler,
    SchedulerConfig,
    SchedulerEvent,
)
from tierlm.core.slots import PROMPT_SLOWDOWN
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.runners.simulated import LLAMA_CPP_CPU_BATCH_COST
from tierlm.testing import run_virtual

TOKEN = 0.05


def device(slots: int, batch_cost: float = LLAMA_CPP_CPU_BATCH_COST) -> SimulatedRunner:
    return SimulatedRunner(
        token_interval=TOKEN,
        swap_seconds=1.0,
        initial_model="m1",
        slots=slots,
        batch_cost=batch_cost,
    )


def background(
    sched: Scheduler, n: int, tokens: int, counts: Counter[int], producers: int | None = None
) -> list[asyncio.Future[str]]:
    handles: list[asyncio.Future[str]] = []
    for i in range(n):
        request = GenerationRequest(model_id="m1", prompt=f"stream {i}", max_tokens=tokens)

        def count(_piece: str, i: int = i) -> None:
            counts[i] += 1

        producer = f"agent{i % producers}" if producers else f"agent{i}"
        handles.append(sched.submit_generation("nataraj", request, count, producer=producer))
    return handles


async def agents_seconds(slots: int) -> float:
    """The agents workload: 16 agents, 300 tokens each, all at once."""

    async with Scheduler(device(slots)) as sched:
        counts: Counter[int] = Counter()
        start = sched.now()
        await asyncio.gather(*background(sched, 16, 300, counts))
        assert sum(counts.values()) == 16 * 300
        return sched.now() - start


def test_eight_slots_give_the_agents_workload_three_times_the_throughput_of_one() -> None:
    one, eight = run_virtual(agents_seconds(1)), run_virtual(agents_seconds(8))
    assert one / eight >= 3.0, (one, eight)


async def test_slots_hold_only_one_model_and_a_swap_empties_every_slot() -> None:
    runner = SimulatedRunner(
        token_interval=TOKEN, swap_seconds=1.0, initial_model="m1", models={"m1", "m2"}, slots=4
    )
    running: dict[int, str] = {}
    mixed: list[set[str]] = []

    def watch(event: SchedulerEvent) -> None:
        if isinstance(event, JobStarted):
            running[event.job.id] = event.job.model_id
            mixed.append(set(running.values()))
        elif isinstance(event, RunEnded):
            running.pop(event.job.id, None)

    async with Scheduler(runner) as sched:
        sched.add_listener(watch)
        jobs = []
        for i in range(12):
            model = "m1" if i % 3 else "m2"
            request = GenerationRequest(model_id=model, prompt=f"p{i}", max_tokens=40)
            jobs.append(sched.submit_generation("nataraj", request, lambda _p: None, f"a{i}"))
        await asyncio.gather(*jobs)
    assert mixed and all(len(models) == 1 for models in mixed), mixed
    assert max(len(m) for m in mixed) == 1


async def chat_among_background(slots: int, batch_cost: float) -> tuple[int, float, float]:
    """(background tokens any stream made between the chat's submit and its
    first token, the chat's tokens/s, the chat's tokens/s alone)."""

    async def chat_rate(sched: Scheduler) -> tuple[float, float]:
        submitted = sched.now()
        first: float | None = None
        tokens = 0
        async for _piece in sched.generate(
            "chat", model_id="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=40
        ):
            tokens += 1
            if first is None:
                first = sched.now()
        assert first is not None
        return first - submitted, (tokens - 1) / (sched.now() - first)

    async with Scheduler(device(1, batch_cost)) as alone_sched:
        _wait, alone = await chat_rate(alone_sched)
    async with Scheduler(device(slots, batch_cost)) as sched:
        counts: Counter[int] = Counter()
        handles = background(sched, 8, 2000, counts)
        await asyncio.sleep(3.0)
        before = Counter(counts)
        seen: dict[int, int] = {}

        def mark(_piece: str) -> None:
            if not seen:
                seen.update({i: counts[i] - before[i] for i in counts})

        submitted = sched.now()
        first: float | None = None
        tokens = 0
        async for piece in sched.generate(
            "chat", model_id="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=40
        ):
            mark(piece)
            tokens += 1
            if first is None:
                first = sched.now()
        assert first is not None and first > submitted
        rate = (tokens - 1) / (sched.now() - first)
        for handle in handles:
            handle.cancel()
        return max(seen.values()), rate, alone


async def test_a_chat_among_eight_streams_gets_its_first_token_within_two_steps() -> None:
    steps, rate, alone = await chat_among_background(8, LLAMA_CPP_CPU_BATCH_COST)
    assert steps <= 2, steps
    assert rate >= alone / SchedulerConfig().chat_slowdown, (rate, alone)


async def test_on_a_steep_curve_the_chat_runs_alone_at_full_speed() -> None:
    """The 1-thread CPU curve (1 + 0.59 (n - 1)): any company slows a chat by
    more than chat_slowdown, so the guard pauses every background sequence."""
    steps, rate, alone = await chat_among_background(8, 0.59)
    assert steps <= 2, steps
    assert rate >= alone / SchedulerConfig().chat_slowdown, (rate, alone)


async def test_two_producers_with_eight_streams_each_on_four_slots_get_half_each() -> None:
    async with Scheduler(device(4, 0.0)) as sched:
        counts: Counter[int] = Counter()
        handles = background(sched, 16, 100_000, counts, producers=2)
        await asyncio.sleep(120.0)
        for handle in handles:
            handle.cancel()
        by_producer: Counter[int] = Counter()
        for stream, tokens in counts.items():
            by_producer[stream % 2] += tokens
        tokens = by_producer
    share = tokens[0] / (tokens[0] + tokens[1])
    assert 0.45 <= share <= 0.55, tokens


async def test_a_producer_with_one_stream_gets_a_slot_every_step() -> None:
    """Max-min fair: one stream can use no more than one slot, and gets it;
    the other producer's eight streams share the rest."""

    async with Scheduler(device(4, 0.0)) as sched:
        counts: Counter[int] = Counter()
        lone = background(sched, 1, 100_000, counts)
        crowd_counts: Counter[int] = Counter()
        crowd = []
        for i in range(8):
            request = GenerationRequest(model_id="m1", prompt=f"crowd {i}", max_tokens=100_000)

            def count(_piece: str, i: int = i) -> None:
                crowd_counts[i] += 1

            crowd.append(sched.submit_generation("nataraj", request, count, producer="crowd"))
        await asyncio.sleep(60.0)
        for handle in [*lone, *crowd]:
            handle.cancel()
        lone, crowd = counts[0], sum(crowd_counts.values())
    steps = round(60.0 / TOKEN)
    assert lone >= 0.9 * steps, (lone, steps)
    assert crowd >= 0.9 * 3 * steps, crowd


async def fairness_preemptions(slots: int) -> int:
    """Preemptions for fairness in the agents workload (16 producers, one
    stream each, 300 tokens)."""

    async with Scheduler(device(slots)) as sched:
        cuts = 0

        def watch(event: SchedulerEvent) -> None:
            nonlocal cuts
            cuts += isinstance(event, Preempting)

        sched.add_listener(watch)
        counts: Counter[int] = Counter()
        await asyncio.gather(*background(sched, 16, 300, counts))
        assert sum(counts.values()) == 16 * 300
        return cuts


def test_a_batch_rotates_producers_no_more_often_than_one_slot() -> None:
    """docs/design.md §4.7: a slice is a share of device time. Beside seven
    others a job uses its slice eight times more slowly, so eight slots hand
    over no more often than one (each hand-over costs a batch a step's worth
    of an empty slot and a prefill)."""
    one, eight = run_virtual(fairness_preemptions(1)), run_virtual(fairness_preemptions(8))
    assert one > 0
    assert eight <= one, (one, eight)


async def test_a_producer_arriving_beside_one_that_holds_every_slot_gets_one_within_a_slice() -> (
    None
):
    """docs/design.md §4.7: a slice is its producer's turn, so jobs of a
    producer holding every slot use their slices at the wall-clock rate. Per
    job alone, eight jobs on eight slots each used a slice in eight, and a
    producer arriving beside them waited for the whole batch to end."""
    config = SchedulerConfig()

    async with Scheduler(device(8), config=config) as sched:
        first: list[float] = []

        def watch(event: SchedulerEvent) -> None:
            if isinstance(event, JobStarted) and event.job.producer == "late" and not first:
                first.append(sched.now())

        sched.add_listener(watch)
        counts: Counter[int] = Counter()
        burst = background(sched, 8, 2_000, counts, producers=1)
        await asyncio.sleep(0.5)
        arrived = sched.now()
        late = sched.submit_generation(
            "nataraj",
            GenerationRequest(model_id="m1", prompt="late", max_tokens=50),
            lambda _piece: None,
            producer="late",
        )
        await late
        for handle in burst:
            handle.cancel()
        waited, streams = first[0] - arrived, len(counts)
    assert streams == 8
    assert waited <= config.slice + 0.5, waited


async def test_a_persons_long_prompt_is_evaluated_alone_from_the_step_it_starts() -> None:
    """docs/design.md §4.7: a chat that meets a full batch stops, at one step
    boundary, every sequence the latency guard would cut once it runs (on the
    0.12 curve its prompt evaluates alone: two sequences cost 1.12x one, past
    PROMPT_SLOWDOWN). Stopped one at a time, the ones left beside its prompt's
    first chunk each made a token after it started."""
    runner = SimulatedRunner(
        token_interval=TOKEN,
        prefill_per_token=0.002,
        initial_model="m1",
        slots=4,
        batch_cost=LLAMA_CPP_CPU_BATCH_COST,
    )

    step = TOKEN * (1 + LLAMA_CPP_CPU_BATCH_COST * 3)  # a step of the full batch

    async with Scheduler(runner) as sched:
        produced: list[float] = []  # when each background token came
        handles = [
            sched.submit_generation(
                "nataraj",
                GenerationRequest(model_id="m1", prompt=f"stream {i}", max_tokens=2000),
                lambda _p: produced.append(sched.now()),
                producer=f"agent{i}",
            )
            for i in range(4)
        ]
        await asyncio.sleep(3.01)  # mid-step
        started: list[float] = []

        def watch(event: SchedulerEvent) -> None:
            if isinstance(event, JobStarted) and event.job.class_name == "chat":
                started.append(sched.now())

        sched.add_listener(watch)
        request = GenerationRequest(
            model_id="m1", prompt="a long message", max_tokens=2, prompt_tokens=400
        )
        submitted = sched.now()
        first: list[float] = []
        chat = sched.submit_generation(
            "chat", request, lambda _p: first.append(sched.now()) if not first else None
        )
        await chat
        for handle in handles:
            handle.cancel()
        # The step it started after delivers its tokens over a moment
        # (one sequence after another); a later step's come a step on.
        beside = sum(started[0] + step / 2 < at <= first[0] for at in produced)
        beside, ttft = beside, first[0] - submitted
    assert beside == 0, beside
    # One step boundary, then its prompt within PROMPT_SLOWDOWN of alone and a token.
    assert ttft <= step + 400 * 0.002 * PROMPT_SLOWDOWN + TOKEN + 1e-9, ttft


async def test_a_job_that_drives_the_runner_itself_never_ends_a_chat() -> None:
    """A closure job that calls ``ctx.runner`` directly used to take the whole
    device on k slots: every other sequence yielded, a person's chat among
    them, and a chat is never re-queued, so it ended ``Cancelled`` after 30
    of its 300 tokens. It holds its own slot now (docs/design.md §4.7)."""

    async def direct(ctx: JobContext) -> int:
        sim = cast("SimulatedRunner", ctx.runner)
        request = GenerationRequest(ctx.model_id, prompt="x", max_tokens=200, prompt_tokens=1)
        outcome = await sim.complete(request, ctx.cancel)
        ctx.checkpoint()
        return outcome.tokens

    async with Scheduler(device(8, batch_cost=0.0)) as sched:
        counts: Counter[int] = Counter()
        streams = background(sched, 4, 200, counts)
        chat: list[str] = []

        async def person() -> None:
            async for piece in sched.generate("chat", "m1", prompt="hi", max_tokens=300):
                chat.append(piece)

        talking = asyncio.create_task(person())
        await asyncio.sleep(30 * TOKEN)  # the chat has made about 30 tokens
        whole = sched.submit("gana", "m1", direct, producer="cron")
        await talking  # raised Cancelled before
        tokens = await whole
        await asyncio.gather(*streams)
        chat_tokens, direct_tokens, streamed, preemptions = (
            len(chat),
            tokens,
            sum(counts.values()),
            sched.stats.preemptions,
        )
    assert chat_tokens == 300
    assert direct_tokens == 200
    assert streamed == 4 * 200
    assert preemptions == 0  # nobody was made to yield for it
