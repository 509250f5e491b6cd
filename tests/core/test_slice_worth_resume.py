"""A slice worth its resume (docs/design.md §4.6): on a backend that
re-evaluates on resume (the default ``SimulatedRunner``, any without KV
restore), a fair slice never cuts a job whose resume would redo more than a
quarter of the slice."""

from __future__ import annotations

import asyncio
import itertools

from tierlm import Scheduler
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.runners.simulated import ResumeCapability, SimulatedCall

TOKEN = 0.05  # s a token: 20 tokens/s
PREFILL = 0.0005  # s a prompt token: 2 000 tokens/s
LONG_PROMPT = 20_000  # tokens: a 10 s evaluation, longer than two slices
LONG_ANSWER = 400  # tokens: 20 s
SMALL_ANSWER = 20  # tokens: 1 s, a small-jobs producer's job
WINDOW = 120.0  # s watched


async def long_prompt_beside_small_jobs(
    resume: ResumeCapability = "re-evaluate", answer: int = LONG_ANSWER, window: float = WINDOW
) -> dict[str, float]:
    """One gana producer sends one job with a 20 000-token prompt, another a
    stream of 1 s jobs; both are backlogged pool producers."""
    runner = SimulatedRunner(
        token_interval=TOKEN, prefill_per_token=PREFILL, initial_model="m1", resume=resume
    )
    busy = 0.0  # the long job's device seconds: evaluating and decoding
    redone = 0.0  # of them, redoing (or restoring) an earlier run's evaluation
    runs = 0

    def count(call: SimulatedCall) -> None:
        nonlocal busy, redone, runs
        if call.request.prompt == "long":
            runs += 1
            busy += call.prompt_seconds + call.tokens * TOKEN
            redone += call.resume_seconds

    runner.on_call = count
    async with Scheduler(runner) as sched:
        started = sched.now()
        small_done = 0
        small_ends: list[float] = []

        async def small_jobs() -> None:
            nonlocal small_done
            while True:
                request = GenerationRequest(
                    model_id="m1", prompt=f"small {small_done}", max_tokens=SMALL_ANSWER
                )
                await sched.submit_generation("gana", request, lambda _p: None, "small")
                small_done += 1
                small_ends.append(sched.now())

        peer = asyncio.create_task(small_jobs())
        await asyncio.sleep(0.5)  # the peer is running: the long job queues behind it
        request = GenerationRequest(
            model_id="m1", prompt="long", max_tokens=answer, prompt_tokens=LONG_PROMPT
        )
        await sched.submit_generation("gana", request, lambda _p: None, "long")
        long_done = sched.now() - started
        await asyncio.sleep(max(0.0, window - (sched.now() - started)))
        small_by_then = small_done
        gaps = [b - a for a, b in itertools.pairwise(small_ends)]
        peer.cancel()
        await asyncio.gather(peer, return_exceptions=True)
        preemptions = sched.snapshot().stats.preemptions
    return {
        "long_done": long_done,
        "small_done": small_by_then,
        "longest_gap": max(gaps),
        "busy": busy,
        "redone": redone,
        "runs": runs,
        "preemptions": preemptions,
    }


async def test_a_long_prompt_is_not_cut_at_every_slice_when_its_resume_re_evaluates() -> None:
    # Before: cut at every 4 s slice, the job re-evaluated its 10 s prompt
    # each turn for about a token and finished after 414-912 s instead of ~30 s.
    got = await long_prompt_beside_small_jobs()
    alone = LONG_PROMPT * PREFILL + LONG_ANSWER * TOKEN  # 30 s
    # Its own 30 s, the peer's fair half beside it, and one resume's redo at most.
    assert got["long_done"] <= 2 * alone + LONG_PROMPT * PREFILL + 4.0, got
    # Redoing its evaluation takes at most a quarter of its device time.
    assert got["redone"] <= 0.25 * got["busy"], got
    # The small-jobs peer waits at most one stretched slice (a quarter of the
    # slice is the 10 s evaluation: 40 s), and over the window it gets the
    # device the long job did not use (90 of 120 s; before: 0.09 jobs/s).
    assert got["longest_gap"] <= LONG_PROMPT * PREFILL / 0.25 + SMALL_ANSWER * TOKEN, got
    assert got["small_done"] >= 0.8 * (WINDOW - alone) / (SMALL_ANSWER * TOKEN), got


async def test_with_kv_restore_the_slices_stay_the_configured_ones() -> None:
    # A backend that restores the evaluation resumes in a moment: after its
    # first (long) turn the job rotates at the configured slice again.
    answer = 2000  # 100 s: several turns
    re_evaluating = await long_prompt_beside_small_jobs(answer=answer, window=300.0)
    restoring = await long_prompt_beside_small_jobs("restore", answer, window=300.0)
    assert restoring["redone"] <= 0.05 * restoring["busy"], restoring
    assert restoring["runs"] > re_evaluating["runs"], (restoring, re_evaluating)
