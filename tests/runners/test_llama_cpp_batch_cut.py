"""A prompt cut short on the batched engine keeps what it evaluated
(docs/design.md §4.7 (the step plan), §4.9 (KV snapshots)).

The batched engine reads a prompt a chunk a step (``PREFILL_CHUNK`` tokens)
and stops a sequence between steps, so a preemption in the middle of a long
prompt loses none of its finished chunks: the resume evaluates only the rest,
to the same greedy text. (The simulator's batched device counts a cut prompt
this way; on one slot llama.cpp's abort drops the ``n_batch`` under way.)
Asserted in token counts and text, never in time.
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
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec  # noqa: E402
from tierlm.runners.llama_cpp.worker.engine.batch import PREFILL_CHUNK  # noqa: E402

CHUNKS_BEFORE_CUT = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("medium") / "medium.gguf", preset="medium")


def runner_for(model: Path, slots: int) -> LlamaCppRunner:
    spec = LlamaModelSpec(model, n_ctx=4096 * slots, n_threads=1)
    return LlamaCppRunner({"big": spec}, isolation="thread", slots=slots)


def long_request(max_tokens: int = 8) -> GenerationRequest:
    # ~1 300 tokens: twenty chunks and more.
    return GenerationRequest(
        model_id="big", prompt="cut: " + "The quick fox. " * 85, max_tokens=max_tokens,
        temperature=0.0,
    )  # fmt: skip


async def evaluated_at_least(runner: LlamaCppRunner, tokens: int) -> None:
    """Wait until the running generation's sequence holds ``tokens``."""
    engine = runner._supervisor.worker._service._engine  # thread isolation: in this process
    # Polled: the decode thread advances n_past and signals nothing.
    await wait_until(
        lambda: engine._running and engine._running[0].n_past >= tokens,
        f"the sequence to hold {tokens} tokens",
        every=0.001,
    )


def test_a_cut_prompt_resumes_from_the_chunks_it_finished(model: Path) -> None:
    async def main() -> None:
        runner = runner_for(model, slots=2)
        await runner.load("big")
        token = CancelToken()
        request = long_request()

        async def read() -> list[str]:
            return [piece async for piece in runner.generate(request, token)]

        reading = asyncio.create_task(read())
        await evaluated_at_least(runner, CHUNKS_BEFORE_CUT * PREFILL_CHUNK)
        assert not reading.done()  # still reading its prompt
        token.cancel(CancelReason.PREEMPTED)
        assert await reading == []
        cut = runner.last_stats
        assert cut is not None and cut.ended == "prefill_aborted"
        # A chat in between, in the other slot and then in its own.
        hi = GenerationRequest(model_id="big", prompt="Hi", max_tokens=2, temperature=0.0)
        await asyncio.gather(*(_drain(runner.generate(hi, CancelToken())) for _ in range(2)))
        resumed = [piece async for piece in runner.generate(request, CancelToken())]
        stats = runner.last_stats
        assert stats is not None
        kept = stats.prompt_tokens - stats.evaluated_tokens
        assert kept >= CHUNKS_BEFORE_CUT * PREFILL_CHUNK, stats
        reference = runner_for(model, slots=1)
        await reference.load("big")
        whole = [p async for p in reference.generate(request, CancelToken())]
        assert resumed == whole
        await reference.aclose()
        await runner.aclose()

    run(main())


async def _drain(pieces: AsyncIterator[str]) -> None:
    async for _piece in pieces:
        pass
