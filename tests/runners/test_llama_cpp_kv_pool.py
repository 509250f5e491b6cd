"""KV snapshots (docs/design.md §4.9), for real in the worker.

A preempted generation's KV state is kept in a bounded pool; its resume
restores it and evaluates only the last token again. Asserted in token counts
and text equality (greedy), never in time: the speed is bench/real_model.py's.

The generated models tokenize one token per byte and evaluate exactly alike
in batches and one token at a time (f16), so a resume that re-evaluates also
gives the uninterrupted text; on the real quantized SmolLM2 only the KV
restore does (tests/integration/test_smollm2.py).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest

from tests.payloads import story
from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.errors import RunnerError
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels
    from tierlm.runners.llama_cpp import GenerationStats

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import RUN_AHEAD, LlamaCppRunner, LlamaModelSpec  # noqa: E402
from tierlm.runners.llama_cpp.wire.faults import FaultInjection  # noqa: E402
from tierlm.runners.llama_cpp.worker.snapshots import MIN_STASH  # noqa: E402

THREADS = 1
TOTAL = 60


def request(
    messages: list[dict[str, str]], max_tokens: int = TOTAL, **more: Any
) -> GenerationRequest:
    return GenerationRequest(
        model_id=more.pop("model_id", "a"),
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        **more,
    )


def runner_for(models: TinyModels, **options: Any) -> LlamaCppRunner:
    return LlamaCppRunner(
        {
            "a": LlamaModelSpec(models.a, n_threads=THREADS),
            "a-1k": LlamaModelSpec(models.a, n_threads=THREADS, n_ctx=1024),
            "b": LlamaModelSpec(models.b, n_threads=THREADS),
        },
        **options,
    )


async def collect(
    runner: LlamaCppRunner, req: GenerationRequest, preempt_after: int | None = None
) -> list[str]:
    token = CancelToken()
    pieces: list[str] = []
    async for piece in runner.generate(req, token):
        pieces.append(piece)
        if len(pieces) == preempt_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces


async def preempt_then_resume(
    runner: LlamaCppRunner, messages: list[dict[str, str]], after: int, *, clobber: bool = True
) -> tuple[str, GenerationStats]:
    """Preempt after ``after`` pieces; run something else (so the context no
    longer holds it); resume. The text, and the resumed run's stats."""
    partial = await collect(runner, request(messages), preempt_after=after)
    assert runner.last_stats is not None and runner.last_stats.ended == "cancelled"
    if clobber:
        await collect(
            runner, GenerationRequest(model_id=runner.loaded_model or "", prompt="zz", max_tokens=3)
        )
    resumed = request(messages, TOTAL - len(partial), resume_text="".join(partial))
    rest = await collect(runner, resumed)
    assert runner.last_stats is not None
    return "".join(partial + rest), runner.last_stats


# -- resume equality ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["kv restore", "re-evaluation"])
def test_preempted_and_resumed_equals_uninterrupted_20_of_20(
    tiny_models: TinyModels, mode: str
) -> None:
    async def main() -> None:
        pool = 512 * 2**20 if mode == "kv restore" else 0
        runner = runner_for(tiny_models, kv_pool_bytes=pool)
        await runner.load("a")
        full = "".join(await collect(runner, request(story())))
        prompt_tokens = await runner.count_prompt_tokens(request(story()))
        rng = random.Random(11)
        for _ in range(20):
            # Early enough that the run is still going when the cancel lands,
            # however far the worker ran ahead of its reader.
            after = rng.randint(1, TOTAL - RUN_AHEAD - 2)
            text, stats = await preempt_then_resume(runner, story(), after)
            assert text == full, after
            partial = stats.prompt_tokens - prompt_tokens
            assert partial >= after
            if mode == "kv restore":
                # Prompt and partial output restored; only the last token again.
                assert stats.resumed_from == "snapshot"
                assert stats.restored_tokens == stats.prompt_tokens - 1
                assert stats.evaluated_tokens == 1
            else:
                # The exact tokens of the preempted run, evaluated again.
                assert stats.resumed_from == "tokens"
                assert stats.restored_tokens == 0
                assert stats.evaluated_tokens == stats.prompt_tokens
        assert runner.kv_pool is not None
        assert runner.kv_pool.restored == (20 if pool else 0)
        # A finished resume's snapshot is dropped: nothing continues it again.
        assert runner.kv_pool.snapshots <= 1
        await runner.aclose()

    run(main())


# -- the bound -----------------------------------------------------------------------


def test_pool_stays_within_its_bound_and_evicted_jobs_are_re_evaluated(
    tiny_models: TinyModels,
) -> None:
    async def main() -> None:
        probe = runner_for(tiny_models)
        await probe.load("a")
        await collect(probe, request(story(0)), preempt_after=20)
        assert probe.last_stats is not None
        one = probe.last_stats.saved_state_bytes
        assert one > 0
        await probe.aclose()

        limit = int(2.5 * one)  # room for two snapshots of this size
        runner = runner_for(tiny_models, kv_pool_bytes=limit)
        await runner.load("a")
        jobs = 8
        expected = {n: "".join(await collect(runner, request(story(n)))) for n in range(jobs)}
        partials = {}
        for n in range(jobs):
            partials[n] = await collect(runner, request(story(n)), preempt_after=20)
            pool = runner.kv_pool
            assert pool is not None
            assert pool.state_bytes <= limit
            assert pool.states <= 2
        assert runner.kv_pool is not None and runner.kv_pool.evicted >= jobs - 2
        # The two most recent come back from their state; the others are
        # re-evaluated from their exact tokens. Every text is exact.
        await collect(runner, GenerationRequest(model_id="a", prompt="zz", max_tokens=3))
        sources = []
        for n in reversed(range(jobs)):
            resumed = request(story(n), TOTAL - 20, resume_text="".join(partials[n]))
            rest = await collect(runner, resumed)
            assert "".join(partials[n] + rest) == expected[n]
            assert runner.last_stats is not None
            sources.append(runner.last_stats.resumed_from)
        assert sources == ["snapshot", "snapshot"] + ["tokens"] * (jobs - 2)
        await runner.aclose()

    run(main())


# -- models ------------------------------------------------------------------------


def test_a_swap_keeps_the_pool(tiny_models: TinyModels) -> None:
    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        full = "".join(await collect(runner, request(story())))
        partial = await collect(runner, request(story()), preempt_after=25)
        await runner.load("b")
        await collect(runner, request(story(), model_id="b"))
        await runner.load("a")
        rest = await collect(runner, request(story(), TOTAL - 25, resume_text="".join(partial)))
        assert "".join(partial + rest) == full
        assert runner.last_stats is not None
        assert runner.last_stats.resumed_from == "snapshot"
        assert runner.last_stats.evaluated_tokens == 1
        await runner.aclose()

    run(main())


def test_a_snapshot_is_never_restored_into_another_model(tiny_models: TinyModels) -> None:
    """The same file with another context size is another model: its resume
    re-tokenizes the text, restores nothing, and still continues exactly."""

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        partial = await collect(runner, request(story()), preempt_after=25)
        await runner.load("a-1k")
        full = "".join(await collect(runner, request(story(), model_id="a-1k")))
        resumed = request(story(), TOTAL - 25, resume_text="".join(partial), model_id="a-1k")
        rest = await collect(runner, resumed)
        assert runner.last_stats is not None
        assert runner.last_stats.resumed_from == "text"
        assert runner.last_stats.restored_tokens == 0
        assert "".join(partial + rest) == full
        await runner.aclose()

    run(main())


# -- crashes -----------------------------------------------------------------------


def test_a_crash_while_restoring_fails_that_job_and_the_next_resume_re_evaluates(
    tiny_models: TinyModels,
) -> None:
    """FAULT INJECTION: the worker segfaults in the middle of a restore."""

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        full = "".join(await collect(runner, request(story())))
        partial = await collect(runner, request(story()), preempt_after=30)
        await collect(runner, GenerationRequest(model_id="a", prompt="zz", max_tokens=3))
        await runner.inject_fault(FaultInjection(at="restore"))
        resumed = request(story(), TOTAL - 30, resume_text="".join(partial), job_id=9)
        with pytest.raises(RunnerError, match=r"crashed \(signal 11\) while generating for job 9"):
            await collect(runner, resumed)
        assert runner.restarts == 1 and runner.loaded_model == "a"
        # The pool died with the worker: the resume re-tokenizes and evaluates.
        rest = await collect(runner, resumed)
        assert runner.last_stats is not None and runner.last_stats.resumed_from == "text"
        assert "".join(partial + rest) == full
        await runner.aclose()

    run(main())


# -- prefixes ----------------------------------------------------------------------


def test_a_long_shared_system_prompt_is_found_again(tiny_models: TinyModels) -> None:
    """Agent rounds repeat a long system prompt; another request in between
    overwrites the context. The second round restores the prompt's state and
    evaluates only what differs."""

    async def main() -> None:
        runner = runner_for(tiny_models)
        await runner.load("a")
        system = {"role": "system", "content": "You are a careful agent. " * 16}

        def round_(n: int) -> GenerationRequest:
            return request([system, {"role": "user", "content": f"Round {n}."}], 10)

        first = await runner.count_prompt_tokens(round_(1))
        assert first > MIN_STASH + 50  # one token a byte: the system prompt dominates
        await collect(runner, round_(1))
        await collect(runner, request(story(), 10))  # the context now holds another prompt
        await collect(runner, round_(2))
        stats = runner.last_stats
        assert stats is not None
        assert stats.restored_tokens >= len(system["content"])
        assert stats.evaluated_tokens <= first - len(system["content"])
        await runner.aclose()

    run(main())


def test_kv_pool_bytes_is_checked() -> None:
    with pytest.raises(ValueError, match="kv_pool_bytes: must be an int >= 0"):
        LlamaCppRunner({}, kv_pool_bytes=-1)
