"""bench/real_model.py's shared settings and timing tools.

The settings every section uses (one llama.cpp thread, greedy decoding, the
background and chat prompts, the throughput target), the console the tables
print to, and the ``large`` section's instruments: ``timed`` notes when each
piece of a stream arrives, and ``Tap`` wraps the runner to note when it was
called, when each piece left it and when its stream ended.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rich.console import Console

from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner
from tierlm.runners.requests import GenerationRequest

PRESET = "large"
THREADS = 1  # see bench/real_model.py's docstring
GREEDY = 0.0
BACKGROUND = [{"role": "user", "content": "Tell me a long story."}]
CHAT = [{"role": "user", "content": "hi"}]
CHAT_TOKENS = 8
TARGET_SHARE = 0.98

# Wide enough for the table when the output goes to a file or a CI log.
console = Console() if sys.stdout.isatty() else Console(width=140)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile: with 20 values, p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def request(model_id: str, messages: list[dict[str, str]], max_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        model_id=model_id, messages=messages, max_tokens=max_tokens, temperature=GREEDY
    )


@dataclass
class Timed:
    started: float
    pieces: list[str]
    times: list[float]

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def seconds(self) -> float:
        return self.times[-1] - self.started

    @property
    def interval(self) -> float:
        return statistics.median(b - a for a, b in itertools.pairwise(self.times))


async def timed(stream: AsyncIterator[str]) -> Timed:
    loop = asyncio.get_running_loop()
    result = Timed(loop.time(), [], [])
    async for piece in stream:
        result.pieces.append(piece)
        result.times.append(loop.time())
    return result


class Tap:
    """A runner that passes everything through and notes, on the event loop, when
    its last generation was called, when each piece came out of the runner, and
    when the runner's stream ended.

    For LlamaCppRunner the stream ends only once its worker has left the
    device: that is "the runner stopped". Comparing these times with the ones
    the scheduler's caller sees gives the scheduler's own delay, free of the
    machine's noise (the decode is the same run).
    """

    def __init__(self, inner: LlamaCppRunner) -> None:
        self.inner = inner
        self.called_at: float | None = None
        self.piece_times: list[float] = []
        self.ended_at: float | None = None

    @property
    def loaded_model(self) -> str | None:
        return self.inner.loaded_model

    @loaded_model.setter
    def loaded_model(self, value: str | None) -> None:  # the Runner protocol's attribute
        self.inner.loaded_model = value

    async def load(self, model_id: str) -> None:
        await self.inner.load(model_id)

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        return self._generate(request, cancel)

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        self.called_at = loop.time()
        self.piece_times = []
        self.ended_at = None
        try:
            async for piece in self.inner.generate(request, cancel):
                self.piece_times.append(loop.time())
                yield piece
        finally:
            self.ended_at = loop.time()
