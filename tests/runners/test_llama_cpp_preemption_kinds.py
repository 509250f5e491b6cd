"""The preemption kinds on the real llama.cpp worker (docs/design.md §4.6, zero-loss preemption).

A yield lets a prompt evaluation finish, produces one token, stops, and keeps
the KV state; a person's preemption aborts the evaluation at once (a yield
under way included), and llama.cpp keeps the batches it finished, which the
resume restores, evaluating only the rest. Asserted in token counts
(``GenerationStats``) and greedy text, never in time.

The cancels are timed by watching the evaluation progress: with
``isolation="thread"`` the worker's code runs in this process, where the test
can read how many tokens the decode engine's one sequence id holds (it
evaluates a prompt ``n_batch`` = 512 tokens a step). A prompt of ~2 600 tokens
on the ``medium`` model is five batches, seconds of evaluation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.helpers import wait_until
from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.requests import GenerationRequest
from tierlm.testing.gguf_model import write_tiny_llama

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import DEFAULT_N_BATCH, LlamaCppRunner, LlamaModelSpec  # noqa: E402

BATCH = DEFAULT_N_BATCH


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("medium") / "medium.gguf", preset="medium")


def make_runner(model: Path, kv_pool_bytes: int = 512 * 2**20) -> LlamaCppRunner:
    spec = LlamaModelSpec(model, n_ctx=4096, n_threads=1)
    return LlamaCppRunner({"big": spec}, isolation="thread", kv_pool_bytes=kv_pool_bytes)


def long_request(name: str, max_tokens: int = 8, resume_text: str = "") -> GenerationRequest:
    # ~2 600 tokens, the first ones its own (no prefix shared with another).
    return GenerationRequest(
        model_id="big",
        prompt=f"{name}: " + "The quick fox. " * 170,
        max_tokens=max_tokens,
        temperature=0.0,
        resume_text=resume_text,
    )


async def short(runner: LlamaCppRunner) -> None:
    """Another generation: the context no longer holds the last one, and
    holds few tokens (so the next evaluation's progress reads from zero)."""
    request = GenerationRequest(model_id="big", prompt="Hi", max_tokens=2, temperature=0.0)
    _ = [piece async for piece in runner.generate(request, CancelToken())]


async def evaluated_at_least(runner: LlamaCppRunner, tokens: int) -> None:
    """Wait until the evaluation under way has done ``tokens`` (its batches)."""
    worker = runner._supervisor.worker  # WorkerThread: the worker's service, here
    kv_slots = worker._service._engine._kv_slots
    # Polled: the decode thread extends the one KV slot's tokens after each
    # step and signals nothing.
    await wait_until(
        lambda: len(kv_slots[0].tokens) >= tokens, f"{tokens} tokens evaluated", every=0.001
    )


async def generate_until(
    runner: LlamaCppRunner, request: GenerationRequest, cancels: list[tuple[int, CancelReason]]
) -> list[str]:
    """Generate ``request``; cancel with each reason once that many of its
    prompt tokens are evaluated."""
    token = CancelToken()

    async def read() -> list[str]:
        return [piece async for piece in runner.generate(request, token)]

    reading = asyncio.create_task(read())
    for tokens, reason in cancels:
        await evaluated_at_least(runner, tokens)
        assert not reading.done()  # still in the evaluation
        token.cancel(reason)
    return await reading


def test_a_yield_finishes_the_evaluation_stops_after_one_token_and_keeps_it(
    slow_model: Path,
) -> None:
    async def main() -> None:
        runner = make_runner(slow_model)
        await runner.load("big")
        await short(runner)
        pieces = await generate_until(runner, long_request("y"), [(BATCH, CancelReason.YIELD)])
        stats = runner.last_stats
        assert stats is not None
        assert len(pieces) == 1  # the whole evaluation, its first token, then the stop
        assert stats.ended == "cancelled" and stats.tokens >= 1
        assert stats.saved_state_bytes > 0  # a yield is a preemption: its state is kept
        await short(runner)
        rest = long_request("y", max_tokens=7, resume_text="".join(pieces))
        resumed = [piece async for piece in runner.generate(rest, CancelToken())]
        stats = runner.last_stats
        assert stats is not None and stats.resumed_from == "snapshot"
        assert stats.evaluated_tokens == 1  # nothing of the prompt evaluated again
        reference = make_runner(slow_model, kv_pool_bytes=0)
        await reference.load("big")
        whole = [p async for p in reference.generate(long_request("y"), CancelToken())]
        assert "".join(pieces + resumed) == "".join(whole)
        await reference.aclose()
        await runner.aclose()

    run(main())


def test_a_yield_under_way_is_aborted_when_a_person_preempts(slow_model: Path) -> None:
    async def main() -> None:
        runner = make_runner(slow_model)
        await runner.load("big")
        await short(runner)
        cancels = [(BATCH, CancelReason.YIELD), (2 * BATCH, CancelReason.PREEMPTED)]
        assert await generate_until(runner, long_request("u"), cancels) == []
        stats = runner.last_stats
        assert stats is not None and stats.ended == "prefill_aborted"
        await runner.aclose()

    run(main())


def test_an_aborted_evaluation_keeps_its_finished_batches_and_the_resume_does_the_rest(
    slow_model: Path,
) -> None:
    """A chat preempts a job two batches into its prompt. llama.cpp drops only
    the aborted batch; the worker keeps the finished ones as the job's
    snapshot (the chat then overwrites the context), and the job's next run
    restores them and evaluates only the rest, to the same greedy text."""

    async def main() -> None:
        runner = make_runner(slow_model)
        await runner.load("big")
        await short(runner)
        request = long_request("p")
        cut = await generate_until(runner, request, [(2 * BATCH, CancelReason.PREEMPTED)])
        stats = runner.last_stats
        assert cut == [] and stats is not None and stats.ended == "prefill_aborted"
        assert stats.saved_state_bytes > 0
        prompt_tokens = stats.prompt_tokens
        await short(runner)  # the chat
        resumed = [piece async for piece in runner.generate(request, CancelToken())]
        stats = runner.last_stats
        assert stats is not None and stats.prompt_tokens == prompt_tokens
        assert 2 * BATCH <= stats.restored_tokens < prompt_tokens - BATCH
        assert stats.evaluated_tokens == prompt_tokens - stats.restored_tokens
        reference = make_runner(slow_model, kv_pool_bytes=0)
        await reference.load("big")
        whole = [p async for p in reference.generate(request, CancelToken())]
        assert resumed == whole
        await reference.aclose()
        await runner.aclose()

    run(main())
