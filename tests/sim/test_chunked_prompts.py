"""On one slot a long prompt is evaluated in ``n_batch`` chunks, and a yield
(a slice, the pool floor) stops it at the end of the chunk under way; a KV
snapshot keeps the chunks, so the resume evaluates only the rest
(docs/design.md §4.6, §4.9). The simulator's device does so
(``DeviceModel(yields_at_chunks=True)``); a bare ``SimulatedRunner`` only with
``yields_at_chunks``."""

from __future__ import annotations

import asyncio

import pytest

from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.endings import Ending, Finish
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedCall, SimulatedRunner
from tierlm.sim.compare import compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads.pool_cases import LongPrompt
from tierlm.testing import run_virtual

PER_TOKEN = 0.01  # a chunk of 512 tokens: 5.12 s


def _runner(resume: str = "restore") -> tuple[SimulatedRunner, list[SimulatedCall]]:
    runner = SimulatedRunner(
        token_interval=0.1,
        prefill_per_token=PER_TOKEN,
        initial_model="m",
        resume=resume,  # type: ignore[arg-type]
        restore_seconds=0.0,
        yields_at_chunks=True,
    )
    calls: list[SimulatedCall] = []
    runner.on_call = calls.append
    return runner, calls


def _request(prompt_tokens: int, resume_text: str = "") -> GenerationRequest:
    return GenerationRequest(
        model_id="m",
        prompt="p",
        prompt_tokens=prompt_tokens,
        max_tokens=3,
        resume_text=resume_text,
    )


async def _run(
    runner: SimulatedRunner, request: GenerationRequest, reason: CancelReason | None, at: float
) -> tuple[float, Ending | None]:
    loop = asyncio.get_running_loop()
    token = CancelToken()
    if reason is not None:
        loop.call_later(at, token.cancel, reason)
    start = loop.time()
    stream = runner.generate(request, token)
    async for _ in stream:
        pass
    return loop.time() - start, stream.ending


def test_a_yield_stops_a_long_prompt_at_the_end_of_its_chunk_and_keeps_the_chunks() -> None:
    runner, calls = _runner()

    async def main() -> None:
        took, ending = await _run(runner, _request(2000), CancelReason.YIELD, 1.0)
        assert took == pytest.approx(512 * PER_TOKEN)  # the first chunk's end, not 20 s
        assert ending is not None and ending.finish is Finish.CANCELLED
        assert ending.tokens == 0
        assert calls[-1].kept_seconds == pytest.approx(512 * PER_TOKEN)  # nothing lost
        took, ending = await _run(runner, _request(2000), None, 0.0)
        assert calls[-1].ready == "restore"  # the chunk is not evaluated again
        assert took == pytest.approx((2000 - 512) * PER_TOKEN + 3 * 0.1)
        assert ending is not None and ending.finish is Finish.LENGTH

    run_virtual(main())


def test_a_yield_in_the_last_chunk_lets_the_evaluation_finish() -> None:
    runner, _ = _runner()

    async def main() -> None:
        took, ending = await _run(runner, _request(600), CancelReason.YIELD, 5.5)
        # 600 tokens: the yield came in the last chunk, the first token stops it.
        assert took == pytest.approx(600 * PER_TOKEN + 0.1)
        assert ending is not None and ending.tokens == 1

    run_virtual(main())


def test_a_person_still_cuts_a_chunk_at_once() -> None:
    runner, calls = _runner()

    async def main() -> None:
        took, _ = await _run(runner, _request(2000), CancelReason.PREEMPTED, 7.0)
        assert took == pytest.approx(7.0)
        assert calls[-1].kept_seconds == pytest.approx(512 * PER_TOKEN)

    run_virtual(main())


def test_without_kv_restore_a_yield_never_cuts_the_evaluation() -> None:
    runner, _ = _runner("re-evaluate")

    async def main() -> None:
        took, ending = await _run(runner, _request(2000), CancelReason.YIELD, 1.0)
        assert took == pytest.approx(2000 * PER_TOKEN + 0.1)
        assert ending is not None and ending.tokens == 1

    run_virtual(main())


class _LongerPrompt(LongPrompt):
    LONG_PROMPT = 4096  # 27.3 s on the default device


def test_a_4096_token_prompt_no_longer_holds_its_peer_off_for_its_evaluation() -> None:
    """The slice acts at a chunk's end: the busy peer is no longer kept off
    the device for the whole 27 s evaluation, and nothing is evaluated twice
    (before: its jobs waited up to 28 s, a 60 s gap of 5.9-7.1 s)."""
    device = DeviceModel(yields_at_chunks=True)  # off by default: llama.cpp's engine does not
    m = compare(_LongerPrompt(), ["tierlm"], duration=600.0, device=device).metrics["tierlm"]
    # Before: the peer's job waited up to 28 s, the evaluation's length.
    assert m["waits_by_producer"]["gana:busy"]["max"] <= 10.0
    assert m["fairness"]["max_diff_60s"] <= 5.0, m["fairness"]
    assert m["waste"]["cut_prompt_seconds"] == pytest.approx(0.0, abs=1e-6)
    assert m["waste"]["reevaluations"] == 0
    assert m["waste"]["wasted_share"] <= 0.01
