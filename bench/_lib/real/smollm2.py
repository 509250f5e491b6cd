"""bench/real_model.py's sections on the real SmolLM2-135M-Instruct (Q4_1).

``isolation``: tokens/s of ``LlamaCppRunner`` with the model in its worker
process (the default) against the same decode code in this process
(``isolation="thread"``), in interleaved pairs (A/B, B/A, ...) so that the
machine's noise hits both alike; the median of the pairs' ratios, target
>= 0.98 (docs/design.md §1.2: what crash isolation costs).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

__all__ = ["ISOLATION_TARGET", "MODEL", "isolation"]

MODEL = "smollm2"
ISOLATION_TARGET = 0.98
# A prompt SmolLM2 answers at length (greedy), so runs reach max_tokens.
STORY = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me a long story about a dragon who learns to bake bread."},
]


@dataclass
class Rate:
    tokens: int
    decode_tokens_per_s: float
    """From the first piece to the last: the decode loop and the hand-over."""
    total_tokens_per_s: float
    """From the call to the last piece (prompt evaluation included)."""
    ttft_s: float


async def rate(runner: LlamaCppRunner, request: GenerationRequest) -> Rate:
    loop = asyncio.get_running_loop()
    started = loop.time()
    times: list[float] = []
    async for _ in runner.generate(request, CancelToken()):
        times.append(loop.time())
    n = len(times)
    decode = (n - 1) / (times[-1] - times[0]) if n > 1 else math.nan
    return Rate(n, decode, n / (times[-1] - started), times[0] - started)


def runner(path: Path, threads: int, isolation: str) -> LlamaCppRunner:
    spec = LlamaModelSpec(path, n_threads=threads)
    return LlamaCppRunner({MODEL: spec}, isolation=isolation)  # type: ignore[arg-type]


async def isolation(
    path: Path, *, pairs: int, tokens: int, threads: int, console: Console
) -> dict[str, Any]:
    """Worker process vs in-process, interleaved, on the same request."""
    process = runner(path, threads, "process")
    thread = runner(path, threads, "thread")
    await process.load(MODEL)
    await thread.load(MODEL)
    request = GenerationRequest(model_id=MODEL, messages=STORY, max_tokens=tokens, temperature=0.0)
    await rate(process, request)  # warm-up: page cache, the OpenMP teams
    await rate(thread, request)
    runs: dict[str, list[Rate]] = {"process": [], "thread": []}
    for i in range(pairs):
        order = ("process", "thread") if i % 2 == 0 else ("thread", "process")
        for name in order:
            runs[name].append(await rate(process if name == "process" else thread, request))
        console.print(
            f"isolation pair {i + 1}/{pairs}: process "
            f"{runs['process'][-1].decode_tokens_per_s:.1f}, thread "
            f"{runs['thread'][-1].decode_tokens_per_s:.1f} tokens/s",
            style="dim",
        )
    await process.aclose()
    await thread.aclose()
    ratios = [
        p.decode_tokens_per_s / t.decode_tokens_per_s
        for p, t in zip(runs["process"], runs["thread"], strict=True)
    ]
    total_ratios = [
        p.total_tokens_per_s / t.total_tokens_per_s
        for p, t in zip(runs["process"], runs["thread"], strict=True)
    ]
    ci = 1.96 * statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else math.nan
    median = statistics.median(ratios)
    return {
        "pairs": pairs,
        "tokens_per_run": tokens,
        "n_threads": threads,
        "process_decode_tokens_per_s_p50": statistics.median(
            r.decode_tokens_per_s for r in runs["process"]
        ),
        "thread_decode_tokens_per_s_p50": statistics.median(
            r.decode_tokens_per_s for r in runs["thread"]
        ),
        "ratio_p50": median,
        "ratio_mean": statistics.mean(ratios),
        "ratio_mean_ci95": ci,
        "total_ratio_p50": statistics.median(total_ratios),
        "ttft_ms_p50": {
            name: statistics.median(r.ttft_s for r in rs) * 1e3 for name, rs in runs.items()
        },
        "target": ISOLATION_TARGET,
        "target_met": "met"
        if median >= ISOLATION_TARGET
        else ("within noise" if statistics.mean(ratios) + ci >= ISOLATION_TARGET else "NOT met"),
        "runs": {name: [asdict(r) for r in rs] for name, rs in runs.items()},
    }
