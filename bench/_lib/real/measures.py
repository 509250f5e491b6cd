"""bench/real_model.py's ``large`` section: one measurement each.

``preemption_trial``: a chat preempts a running background generation; its
latencies and what resume kept (sections 1 and 4 of bench/real_model.py).
``bare_rate`` / ``scheduled_rate``: one throughput run on the bare runner or
through the scheduler, and ``verdict`` on the pairs' shares (section 2).
``swap_times``: model swaps from the scheduler's events (section 3).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
import time
from dataclasses import dataclass

from _lib.real.common import BACKGROUND, CHAT, CHAT_TOKENS, GREEDY, TARGET_SHARE, Tap, timed
from tierlm import (
    JobContext,
    JobEvent,
    JobStarted,
    JobSubmitted,
    Preempting,
    Requeued,
    RunEnded,
    Scheduler,
    SchedulerEvent,
    SwapFinished,
)
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner
from tierlm.runners.requests import GenerationRequest

# -- 1 and 4: preemption trials -------------------------------------------------


@dataclass
class Trial:
    point: int
    """Background tokens the caller had read when the chat arrived."""
    phase: float
    """Extra delay after that token, as a fraction of a token interval."""
    decision_ms: float
    stop_ms: float
    requeue_ms: float
    chat_start_ms: float
    """Arrival to the chat's STARTED: its wait for the device."""
    first_token_ms: float
    interval_ms: float
    """This trial's token interval: the median gap between background pieces."""
    partial_tokens: int
    """Tokens kept by resume (a restart would generate them again)."""
    discarded_tokens: int
    """Tokens the stopped run decoded after the cancel, dropped and regenerated."""
    resumed_run_s: float
    """The background's run after the preemption: STARTED (attempt 2) to COMPLETED."""
    resumed_prefill_ms: float
    """That run's prompt evaluation: prompt + partial output."""
    resume_exact: bool
    chat_exact: bool


async def preemption_trial(
    sched: Scheduler,
    clock: Tap,
    runner: LlamaCppRunner,
    total: int,
    point: int,
    phase: float,
    interval: float,
    expected: str,
    chat_expected: str,
) -> Trial:
    marks: dict[str, float] = {}
    stopped_tokens: list[int] = []

    names = {JobSubmitted: "submitted", Preempting: "preempting", Requeued: "requeued"}

    def listen(event: SchedulerEvent) -> None:
        if not isinstance(event, JobEvent):
            return
        if isinstance(event, JobStarted):
            kind = f"started:{event.attempt}"
        elif isinstance(event, RunEnded):
            kind = event.outcome
        else:
            kind = names.get(type(event), type(event).__name__)
        marks.setdefault(f"{event.job.class_name}:{kind}", event.time)
        if isinstance(event, Requeued):
            # The runner's stream has ended: read its stop time and stats now,
            # before the chat's generation replaces them.
            assert clock.ended_at is not None and runner.last_stats is not None
            marks["runner_stop"] = clock.ended_at
            stopped_tokens.append(runner.last_stats.tokens)

    remove = sched.add_listener(listen)
    reached = asyncio.Event()
    background: list[str] = []
    times: list[float] = []
    loop = asyncio.get_running_loop()

    async def consume() -> None:
        stream = sched.generate(
            "nataraj", "a", messages=BACKGROUND, max_tokens=total, temperature=GREEDY
        )
        async for piece in stream:
            background.append(piece)
            times.append(loop.time())
            if len(background) == point:
                reached.set()

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(reached.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():
        task.result()
        raise RuntimeError("the background generation ended before the chat arrived")
    await asyncio.sleep(phase * interval)
    chat = await timed(
        sched.generate("chat", "a", messages=CHAT, max_tokens=CHAT_TOKENS, temperature=GREEDY)
    )
    await task
    remove()
    resumed = runner.last_stats  # the background's resumed run was the last one
    assert resumed is not None and stopped_tokens
    arrival = marks["chat:submitted"]
    partial = total - resumed.tokens
    return Trial(
        point=point,
        phase=phase,
        decision_ms=(marks["nataraj:preempting"] - arrival) * 1e3,
        stop_ms=(marks["runner_stop"] - arrival) * 1e3,
        requeue_ms=(marks["nataraj:requeued"] - arrival) * 1e3,
        chat_start_ms=(marks["chat:started:1"] - arrival) * 1e3,
        first_token_ms=(chat.times[0] - arrival) * 1e3,
        interval_ms=statistics.median(b - a for a, b in itertools.pairwise(times)) * 1e3,
        partial_tokens=partial,
        discarded_tokens=stopped_tokens[0] - partial,
        resumed_run_s=marks["nataraj:completed"] - marks["nataraj:started:2"],
        resumed_prefill_ms=resumed.prefill_seconds * 1e3,
        resume_exact="".join(background) == expected,
        chat_exact=chat.text == chat_expected,
    )


# -- 2: throughput --------------------------------------------------------------


@dataclass
class Run:
    tokens_per_s: float
    """As the caller sees it: ``generate`` called to the last piece."""
    loop_cpu_us_per_token: float
    """CPU time of the event loop's thread per token. All of the scheduler's
    work runs there (decoding runs in the runner's worker process), and CPU time
    hardly moves with other processes' load, unlike wall time."""
    runner_share: float = 1.0
    """Scheduled runs: the runner's own time (its ``generate`` called to its
    last piece) over the caller's; what is left after the scheduler's dispatch
    and hand-offs."""


async def bare_rate(runner: LlamaCppRunner, req: GenerationRequest) -> Run:
    cpu = time.thread_time()
    result = await timed(runner.generate(req, CancelToken()))
    cpu = time.thread_time() - cpu
    n = len(result.pieces)
    return Run(n / result.seconds, cpu / n * 1e6)


async def scheduled_rate(sched: Scheduler, tap: Tap, req: GenerationRequest) -> Run:
    assert req.messages is not None
    cpu = time.thread_time()
    stream = sched.generate(
        "nataraj",
        req.model_id,
        messages=req.messages,
        max_tokens=req.max_tokens,
        temperature=GREEDY,
    )
    result = await timed(stream)
    cpu = time.thread_time() - cpu
    assert tap.called_at is not None and tap.piece_times
    runner_seconds = tap.piece_times[-1] - tap.called_at
    n = len(result.pieces)
    return Run(n / result.seconds, cpu / n * 1e6, runner_seconds / result.seconds)


def verdict(shares: list[float]) -> str:
    """ "met" if the median share reaches the target; "within noise" if it does
    not but the 95 % interval of the mean reaches it (the machine's noise alone
    can explain the gap); otherwise "NOT met"."""
    if statistics.median(shares) >= TARGET_SHARE:
        return "met"
    ci = 1.96 * statistics.stdev(shares) / math.sqrt(len(shares))
    return "within noise" if statistics.mean(shares) + ci >= TARGET_SHARE else "NOT met"


# -- 3: swaps -------------------------------------------------------------------


async def one_token(ctx: JobContext) -> str:
    """Proves the swapped-in model runs."""
    return "".join([p async for p in ctx.generate(prompt="x", max_tokens=1)])


async def swap_times(runner: LlamaCppRunner, reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"a->b": [], "b->a": []}

    def listen(event: SchedulerEvent) -> None:
        if isinstance(event, SwapFinished):
            pair = f"{event.previous}->{event.job.model_id}"
            times.setdefault(pair, []).append(event.seconds * 1e3)

    # A fresh scheduler: no chat on record, so no chat grace holds a swap back.
    async with Scheduler(runner) as sched:
        sched.add_listener(listen)
        for model in ["b", "a"] * reps:
            await sched.run("gana", model, one_token)
    return times
