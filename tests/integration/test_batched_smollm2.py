"""A batched llama.cpp device through the real Scheduler, on the real SmolLM2
(docs/design.md §4.7): counted in tokens, never in milliseconds."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from tests.payloads import story
from tests.runners.helpers import run
from tierlm import Scheduler
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import (
    DEFAULT_CHAT_MODEL_ID,
    LlamaCppRunner,
    LlamaModelSpec,
)

MODEL = DEFAULT_CHAT_MODEL_ID
STREAMS = 6


def test_background_streams_decode_together_and_a_chat_gets_a_slot_within_two_steps(
    smollm2: Path,
) -> None:
    async def main() -> tuple[int, int, int]:
        runner = LlamaCppRunner({MODEL: LlamaModelSpec(smollm2, n_threads=2)}, slots=8)
        async with Scheduler(runner) as sched:
            counts: Counter[int] = Counter()
            all_going = asyncio.Event()
            handles = []
            for i in range(STREAMS):
                request = GenerationRequest(
                    model_id=MODEL,
                    messages=story(i),
                    max_tokens=400,
                    temperature=0.0,
                )

                def count(_piece: str, i: int = i) -> None:
                    counts[i] += 1
                    if len(counts) == STREAMS and min(counts.values()) >= 5:
                        all_going.set()

                handles.append(sched.submit_generation("nataraj", request, count, f"agent{i}"))
            # Every stream is producing: they run side by side, not in turn.
            await asyncio.wait_for(all_going.wait(), 300)
            concurrent = len(sched.snapshot().running_jobs)
            before = Counter(counts)
            behind: list[int] = []
            async for _piece in sched.generate(
                "chat",
                model_id=MODEL,
                messages=[{"role": "user", "content": "Hi!"}],
                max_tokens=8,
                temperature=0.0,
            ):
                if not behind:
                    behind.append(max(counts[i] - before[i] for i in range(STREAMS)))
            for handle in handles:
                handle.cancel()
            await runner.aclose()
            return concurrent, behind[0], sum(counts.values())

    concurrent, behind, total = run(main())
    assert concurrent == STREAMS
    # Its prompt is a few chunks; the guard stops the streams it must at their
    # next token: a handful of steps at most, never a stream's whole answer.
    assert behind <= 2 + 2, behind
    assert total >= STREAMS * 5
