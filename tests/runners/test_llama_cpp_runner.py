"""LlamaCppRunner against generated GGUF models, for real, in its worker
process (the default) and, where it matters, in-process (``isolation="thread"``).

What a user of the runner would notice: text streams one token at a time
without freezing the event loop; a cancel stops the stream within a token and
frees the device; a long prompt evaluation is abandoned at once; a preempted
generation resumes with nothing lost or repeated; two models swap; bad models
fail with an error that names them. Crashes, load options and token counts:
``test_llama_cpp_worker.py``.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

import pytest

from tests.payloads import STORY
from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.requests import GenerationRequest
from tierlm.testing.gguf_model import write_tiny_llama

if TYPE_CHECKING:
    from pathlib import Path

    from tests.runners.helpers import TinyModels
    from tierlm.runners.llama_cpp import LlamaCppRunner

pytestmark = pytest.mark.llama
llama_cpp_mod = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import RUN_AHEAD, LlamaCppRunner, LlamaModelSpec  # noqa: E402

GREEDY = 0.0


# One thread: the tiny models are not compute-bound, and llama.cpp's threads
# spin-wait on each other, which crawls when other processes share the cores.
THREADS = 1


def runner_for(models: TinyModels, **options: Any) -> LlamaCppRunner:
    return LlamaCppRunner(
        {
            "a": LlamaModelSpec(models.a, n_threads=THREADS),
            "b": LlamaModelSpec(models.b, n_threads=THREADS),
        },
        **options,
    )


def chat(
    model: str = "a", max_tokens: int = 64, *, resume_text: str = "", stop: tuple[str, ...] = ()
) -> GenerationRequest:
    """The test chat, sampled greedily (deterministic)."""
    return GenerationRequest(
        model_id=model,
        messages=STORY,
        max_tokens=max_tokens,
        temperature=GREEDY,
        resume_text=resume_text,
        stop=stop,
    )


async def collect(
    runner: LlamaCppRunner,
    request: GenerationRequest,
    *,
    cancel_after: int | None = None,
    cancel: CancelToken | None = None,
) -> list[str]:
    """The pieces of one generation; cancel (as a preemption) after N pieces."""
    token = cancel or CancelToken()
    pieces: list[str] = []
    async for piece in runner.generate(request, token):
        pieces.append(piece)
        if cancel_after is not None and len(pieces) == cancel_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_streams_one_printable_piece_per_token(tiny_models: TinyModels, isolation: str) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models, isolation=isolation)
        assert runner.loaded_model is None
        await runner.load("a")
        assert runner.loaded_model == "a"
        for request in (
            chat(max_tokens=50),
            GenerationRequest(model_id="a", prompt="Once upon a time", max_tokens=50),
        ):
            pieces = await collect(runner, request)
            assert len(pieces) == 50  # runs to max_tokens
            assert all(len(p) == 1 and p.isprintable() and p.isascii() for p in pieces)
            assert runner.last_stats is not None
            assert runner.last_stats.tokens == 50
            assert runner.last_stats.ended == "max_tokens"
        await runner.aclose()

    run(main())


def test_chat_is_rendered_with_the_models_chat_template(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        rendered = await runner.prompt_text(chat())
        assert rendered == ("<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n")
        # The chat generates exactly what the rendered text does as a raw prompt.
        as_chat = await collect(runner, chat(max_tokens=30))
        as_prompt = await collect(
            runner,
            GenerationRequest(model_id="a", prompt=rendered, max_tokens=30, temperature=GREEDY),
        )
        assert as_chat == as_prompt
        await runner.aclose()

    run(main())


def test_event_loop_keeps_running_while_tokens_are_produced(tiny_models: TinyModels) -> None:
    """Counted, not timed: a ticker task records where its ticks fall among
    the pieces. A loop blocked by the prompt evaluation would tick 0 times
    before the first piece; one blocked by the decoding, 0 times between
    pieces (the worker runs at most RUN_AHEAD tokens ahead of its reader, so
    the reader must wait, and the ticker run, again and again)."""

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        timeline: list[str] = []  # "tick" and "piece", in the order they happened
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                await asyncio.sleep(0)
                timeline.append("tick")

        tick = asyncio.create_task(ticker())
        # A prompt long enough to keep the device busy for a while, then tokens.
        request = GenerationRequest(model_id="a", prompt="abc " * 400, max_tokens=400)
        pieces = []
        async for piece in runner.generate(request, CancelToken()):
            pieces.append(piece)
            timeline.append("piece")
        stop.set()
        await tick
        assert len(pieces) == 400
        first = timeline.index("piece")
        assert timeline[:first].count("tick") >= 10  # the prompt evaluation
        # Between the first and the last piece: ticks in many of the gaps.
        during = timeline[first : len(timeline) - timeline[::-1].index("piece")]
        ticked_gaps = sum(1 for a, b in itertools.pairwise(during) if (a, b) == ("piece", "tick"))
        assert ticked_gaps >= 400 // RUN_AHEAD // 4

    run(main())


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_cancel_stops_within_a_token_and_frees_the_device(
    tiny_models: TinyModels, isolation: str
) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models, isolation=isolation)
        await runner.load("a")
        token = CancelToken()
        pieces: list[str] = []
        async for piece in runner.generate(chat(max_tokens=1500), token):
            pieces.append(piece)
            if len(pieces) == 10:
                token.cancel(CancelReason.PREEMPTED)
        assert len(pieces) == 10  # nothing is streamed after the cancel
        # The stream ended only once the worker had stopped (its stats came back).
        assert runner.last_stats is not None
        assert runner.last_stats.ended == "cancelled"
        # The worker stopped within a token of the cancel, plus what it may
        # decode ahead of its reader (bounded, whatever the machine's load).
        assert runner.last_stats.tokens <= 10 + RUN_AHEAD + 1
        # The device is free at once: the next generation runs normally.
        assert len(await collect(runner, chat(max_tokens=5))) == 5
        await runner.aclose()

    run(main())


def test_consumer_that_walks_away_stops_the_worker(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        stream = runner.generate(chat(max_tokens=1500), CancelToken())
        async for _ in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]
        assert runner.last_stats is not None
        assert runner.last_stats.ended == "cancelled"
        assert runner.last_stats.tokens <= 1 + RUN_AHEAD + 1
        await runner.aclose()

    run(main())


def test_already_cancelled_token_yields_nothing(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        token = CancelToken()
        token.cancel()
        assert await collect(runner, chat(), cancel=token) == []

    run(main())


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A long prompt takes seconds to evaluate on the "medium" preset.
    return write_tiny_llama(tmp_path_factory.mktemp("medium") / "medium.gguf", preset="medium")


def test_long_prompt_evaluation_is_aborted_and_the_model_still_works(slow_model: Path) -> None:
    async def main() -> None:
        runner = LlamaCppRunner({"big": LlamaModelSpec(slow_model, n_ctx=4096, n_threads=THREADS)})
        await runner.load("big")
        probe = GenerationRequest(model_id="big", prompt="Hello", max_tokens=8, temperature=GREEDY)
        before = await collect(runner, probe)

        # ~4000 tokens: seconds of prompt evaluation on this model.
        request = GenerationRequest(model_id="big", prompt="The quick fox. " * 260, max_tokens=8)
        token = CancelToken()
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, token.cancel, CancelReason.PREEMPTED)
        pieces = await collect(runner, request, cancel=token)
        assert pieces == []
        assert runner.last_stats is not None
        # llama_decode was aborted inside the prompt's evaluation (had it run to
        # the end, the loop would have seen the cancel before the next token).
        assert runner.last_stats.ended == "prefill_aborted"
        assert runner.last_stats.prompt_tokens > 3000

        # The context works as before the abort.
        assert await collect(runner, probe) == before
        await runner.aclose()

    run(main())


# -- resume -------------------------------------------------------------------


@pytest.mark.parametrize("between", ["nothing", "another generation", "a swap and back"])
def test_resume_continues_exactly_where_the_preempted_run_stopped(
    tiny_models: TinyModels, between: str
) -> None:
    """Greedy: partial + continuation == the uninterrupted run, token for token.

    The vocabulary is one token per byte, so re-tokenizing the partial text gives
    back the tokens that were generated, and the continuation is the same text
    whether the KV cache is reused (nothing in between) or recomputed.
    """

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        total = 80
        full = await collect(runner, chat(max_tokens=total))
        partial = await collect(runner, chat(max_tokens=total), cancel_after=30)
        assert partial == full[:30]
        if between == "another generation":
            await collect(runner, GenerationRequest(model_id="a", prompt="xyz", max_tokens=20))
        elif between == "a swap and back":
            await runner.load("b")
            await runner.load("a")
        rest = await collect(runner, chat(max_tokens=total - 30, resume_text="".join(partial)))
        assert len(rest) == total - 30  # max_tokens counts the new tokens only
        assert "".join(partial) + "".join(rest) == "".join(full)

    run(main())


def test_resume_of_a_prompt_continues_prompt_plus_partial(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("b")
        request = GenerationRequest(
            model_id="b", prompt="Dear diary,", max_tokens=60, temperature=0
        )
        full = "".join(await collect(runner, request))
        partial = "".join(await collect(runner, request, cancel_after=25))
        resumed = GenerationRequest(
            model_id="b", prompt="Dear diary,", max_tokens=35, temperature=0, resume_text=partial
        )
        assert partial + "".join(await collect(runner, resumed)) == full

    run(main())


# -- stop strings -------------------------------------------------------------


def test_stop_string_ends_the_text_before_it(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        full = "".join(await collect(runner, chat(max_tokens=60)))
        stop = full[20:23]
        expected = full[: full.index(stop)]
        pieces = await collect(runner, chat(max_tokens=60, stop=(stop,)))
        assert "".join(pieces) == expected
        assert runner.last_stats is not None
        assert runner.last_stats.ended == "stop"

    run(main())


# -- swaps --------------------------------------------------------------------


def test_swap_between_the_two_models(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        text_a = await collect(runner, chat("a", 40))
        await runner.load("b")
        assert runner.loaded_model == "b"
        assert runner.loads == 2
        assert runner.last_load_seconds is not None
        text_b = await collect(runner, chat("b", 40))
        assert text_a != text_b  # two different models
        await runner.load("b")  # already loaded: no swap
        assert runner.loads == 2
        with pytest.raises(RunnerError, match=r"'a': not loaded \(loaded: 'b'\)"):
            await collect(runner, chat("a"))
        await runner.load("a")
        assert await collect(runner, chat("a", 40)) == text_a

    run(main())


def test_load_waits_for_a_stopping_generation(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        token = CancelToken()
        stream = runner.generate(chat(max_tokens=1500), token)
        await anext(stream)
        # The scheduler cancels and swaps without waiting for the stream to end.
        token.cancel(CancelReason.PREEMPTED)
        await runner.load("b")
        assert [p async for p in stream] == []
        assert len(await collect(runner, chat("b", 10))) == 10

    run(main())


def test_two_option_sets_of_one_file_are_two_models(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = LlamaCppRunner(
            {
                "a-512": LlamaModelSpec(tiny_models.a, n_ctx=512),
                "a-2k": LlamaModelSpec(tiny_models.a, n_ctx=2048),
            }
        )
        long_prompt = GenerationRequest(model_id="a-512", prompt="x" * 700, max_tokens=4)
        await runner.load("a-512")
        with pytest.raises(RunnerError, match=r"a-512.*700 tokens.*context of 512"):
            await collect(runner, long_prompt)
        await runner.load("a-2k")
        assert runner.loads == 2
        fits = GenerationRequest(model_id="a-2k", prompt="x" * 700, max_tokens=4)
        assert len(await collect(runner, fits)) == 4

    run(main())


def test_generation_stops_when_the_context_is_full(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = LlamaCppRunner({"a": LlamaModelSpec(tiny_models.a, n_ctx=256)})
        await runner.load("a")
        request = GenerationRequest(model_id="a", prompt="x" * 200, max_tokens=500)
        pieces = await collect(runner, request)
        # n_ctx - prompt + 1: the last sampled token never needs a KV slot.
        assert len(pieces) == 256 - 200 + 1
        assert runner.last_stats is not None
        assert runner.last_stats.ended == "context_full"

    run(main())


# -- errors -------------------------------------------------------------------


def test_bad_model_files_fail_with_the_model_and_cause(
    tiny_models: TinyModels, tmp_path: Path
) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("these are my notes, not a model")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_models.a.read_bytes()[:5000])

    async def main() -> None:
        runner = LlamaCppRunner(
            {
                "gone": tmp_path / "nowhere.gguf",
                "notes": not_gguf,
                "cut": truncated,
                "a": tiny_models.a,
            }
        )
        await runner.load("a")
        cases = {
            "gone": r"'gone'.*nowhere\.gguf.*No such file",
            "notes": r"'notes'.*notes\.gguf.*not a GGUF file",
            "cut": r"'cut'.*could not load.*truncated\.gguf",
            "unknown": r"'unknown'.*not configured",
        }
        for model_id, pattern in cases.items():
            with pytest.raises(RunnerError, match=pattern) as info:
                await runner.load(model_id)
            assert info.value.model_id == model_id
            # The old model was closed first (a swap frees the device).
            assert runner.loaded_model is None or model_id == "unknown"
        # A failed load leaves the runner usable.
        await runner.load("a")
        assert len(await collect(runner, chat(max_tokens=3))) == 3

    run(main())


# -- sampling options -----------------------------------------------------------


def test_a_gbnf_grammar_constrains_the_output(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        grammar = 'root ::= ("yes" | "no") " " [0-9] [0-9]'
        request = GenerationRequest(
            model_id="a", prompt="Answer:", max_tokens=20, temperature=0, extra={"grammar": grammar}
        )
        text = "".join(await collect(runner, request))
        assert text[:3] in ("yes", "no ") and text[-2:].isdigit()
        assert runner.last_stats is not None and runner.last_stats.ended == "eos"
        await runner.aclose()

    run(main())


def test_bad_or_unsupported_sampling_options_are_refused_by_name(tiny_models: TinyModels) -> None:
    """An invalid grammar would make llama.cpp return a null sampler (a segfault
    in a chain); it is refused with a clear error instead, and nothing crashes.
    Each refusal is an ``InvalidRequest`` naming the request field, both when
    the prompt is counted (before a gateway queues it) and when generating."""

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        for extra, param, pattern in (
            ({"grammar": "root ::= yes"}, "grammar", r"^grammar: not a valid GBNF grammar"),
            ({"logit_bias": {"99999": 5.0}}, "logit_bias.99999", r"token id 99999 is not in"),
            ({"typo_p": 0.5}, "typo_p", r"^typo_p: not supported by the llama-cpp runner"),
            (
                {"response_format": {"type": "json_schema", "json_schema": {"schema": {
                    "type": "object", "properties": {"n": {"type": "integer", "minimum": 5,
                                                           "maximum": 4}},
                }}}},
                "response_format.json_schema.schema",
                r"cannot be made a grammar: no integer is between 5 and 4",
            ),
        ):  # fmt: skip
            request = GenerationRequest(model_id="a", prompt="x", max_tokens=4, extra=extra)
            with pytest.raises(InvalidRequest, match=pattern) as counted:
                await runner.count_prompt_tokens(request)
            assert counted.value.param == param
            with pytest.raises(InvalidRequest, match=pattern) as generated:
                await collect(runner, request)
            assert (generated.value.param, generated.value.model_id) == (param, "a")
        assert runner.restarts == 0
        assert len(await collect(runner, chat(max_tokens=4))) == 4
        await runner.aclose()

    run(main())
