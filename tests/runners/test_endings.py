"""A runner's stream says how it ended (docs/design.md §2.7): the simulated
device in virtual time, the llama.cpp worker on a generated GGUF, and an
upstream's own word (``upstream_ending``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.endings import Ending, Finish, Stream, ending_of
from tierlm.runners.http import upstream_ending
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels


def request(max_tokens: int, model: str = "m", prompt: str = "x" * 8) -> GenerationRequest:
    return GenerationRequest(model_id=model, prompt=prompt, max_tokens=max_tokens)


async def read(stream: AsyncIterator[str]) -> tuple[list[str], Ending | None]:
    pieces = [piece async for piece in stream]
    assert isinstance(stream, Stream)
    return pieces, stream.ending


# -- the simulated device -------------------------------------------------------


@pytest.mark.parametrize("per_token", [True, False])
@pytest.mark.parametrize("slots", [1, 2])
async def test_the_simulated_device_says_each_ending(per_token: bool, slots: int) -> None:
    runner = SimulatedRunner(
        initial_model="m", per_token=per_token, slots=slots, contexts={"small": 6}, answer_tokens=5
    )
    runner.models = None
    pieces, ending = await read(runner.generate(request(3), CancelToken()))
    assert (len(pieces), ending) == (3, Ending(Finish.LENGTH, 3, 2))
    pieces, ending = await read(runner.generate(request(10), CancelToken()))
    assert (len(pieces), ending) == (5, Ending(Finish.STOP, 5, 2))
    await runner.load("small")
    pieces, ending = await read(runner.generate(request(10, "small"), CancelToken()))
    assert (len(pieces), ending) == (4, Ending(Finish.CONTEXT, 4, 2))  # 2 of prompt + 4 = 6
    # A preemption during its third token (0.05 s each): it ends after that token.
    await runner.load("m")
    token = CancelToken()
    asyncio.get_running_loop().call_later(0.12, token.cancel, CancelReason.PREEMPTED)
    pieces, ending = await read(runner.generate(request(10), token))
    assert (len(pieces), ending) == (3, Ending(Finish.CANCELLED, 3, 2))


async def test_a_resumed_answer_ends_where_the_whole_would() -> None:
    runner = SimulatedRunner(initial_model="m", answer_tokens=5)
    first, _ = await read(runner.generate(request(2), CancelToken()))
    rest = GenerationRequest(model_id="m", prompt="x" * 8, max_tokens=8, resume_text="".join(first))
    pieces, ending = await read(runner.generate(rest, CancelToken()))
    assert (len(pieces), ending and ending.finish) == (3, Finish.STOP)


async def test_a_stream_that_says_nothing_is_read_by_its_count() -> None:
    async def bare() -> AsyncIterator[str]:
        for text in ("a", "b"):
            yield text

    for max_tokens, finish in ((2, Finish.LENGTH), (5, Finish.STOP)):
        stream = bare()
        assert [p async for p in stream] == ["a", "b"]
        assert ending_of(stream, request(max_tokens), 2, CancelToken()).finish is finish
    cancelled = CancelToken()
    cancelled.cancel(CancelReason.CALLER)
    assert ending_of(bare(), request(5), 0, cancelled).finish is Finish.CANCELLED


def test_an_upstreams_word_is_passed_on() -> None:
    assert upstream_ending("content_filter", 2, 10).finish is Finish.CONTENT_FILTER
    assert upstream_ending("length", 10, 10).finish is Finish.LENGTH
    assert upstream_ending("stop", 10, 10).finish is Finish.STOP  # it said so: believed
    assert upstream_ending("tool_calls", 4, 10).finish is Finish.STOP
    assert upstream_ending(None, 10, 10).finish is Finish.LENGTH  # cut here at max_tokens
    assert upstream_ending(None, 3, 10).finish is Finish.STOP
    odd = upstream_ending("eos_token", 3, 10)
    assert (odd.finish, odd.detail) == (Finish.STOP, "eos_token")


# -- llama.cpp, on a generated GGUF ----------------------------------------------


@pytest.mark.llama
def test_the_llama_worker_says_each_ending(tiny_models: TinyModels) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec

    async def main() -> None:
        runner = LlamaCppRunner({"a": LlamaModelSpec(tiny_models.a, n_ctx=256, n_threads=1)})
        try:
            await runner.load("a")
            prompt = "x" * 200

            async def ending_of_request(max_tokens: int, **extra: str) -> tuple[int, Ending | None]:
                req = GenerationRequest(
                    model_id="a", prompt=prompt, max_tokens=max_tokens, temperature=0.0, extra=extra
                )
                pieces, ending = await read(runner.generate(req, CancelToken()))
                return len(pieces), ending

            tokens, ending = await ending_of_request(8)
            assert ending == Ending(Finish.LENGTH, 8, 200, "max_tokens")
            # A grammar that allows "ab" and then only the end of sequence.
            tokens, ending = await ending_of_request(20, grammar='root ::= "ab"')
            assert ending is not None and (tokens, ending.finish, ending.detail) == (
                2,
                Finish.STOP,
                "eos",
            )
            tokens, ending = await ending_of_request(500)
            assert ending is not None and (ending.finish, ending.detail) == (
                Finish.CONTEXT,
                "context_full",
            )
            assert tokens == ending.tokens == 256 - 200 + 1
        finally:
            await runner.aclose()

    run(main())
