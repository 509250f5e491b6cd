"""bench/real_model.py's ``large`` section: the run and its results.

``run_large`` writes (or reuses) the two generated models, and ``bench`` takes
every measurement of sections 1-4 in one run on them (reference runs on the
idle device, preemption trials, interleaved throughput pairs, swaps) and
reduces them to the section's results; the table is bench/_lib/real/large_table.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _lib.real.common import (
    BACKGROUND,
    CHAT,
    CHAT_TOKENS,
    PRESET,
    TARGET_SHARE,
    THREADS,
    Tap,
    Timed,
    console,
    pct,
    request,
    timed,
)
from _lib.real.large_table import print_table
from _lib.real.measures import (
    Run,
    Trial,
    bare_rate,
    preemption_trial,
    scheduled_rate,
    swap_times,
    verdict,
)
from _lib.results import load_now
from tierlm import Scheduler
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec
from tierlm.testing.gguf_model import PRESETS, write_model_pair


async def bench(args: argparse.Namespace, paths: tuple[Path, Path]) -> dict[str, Any]:
    rng = random.Random(args.seed)
    runner = LlamaCppRunner(
        {
            "a": LlamaModelSpec(paths[0], n_threads=THREADS),
            "b": LlamaModelSpec(paths[1], n_threads=THREADS),
        }
    )
    started = time.perf_counter()
    await runner.load("a")
    first_load_ms = (time.perf_counter() - started) * 1e3
    total = args.tokens

    # The uninterrupted runs on the idle device: expected texts, token interval,
    # and the chat's time to first token. llama-cpp-python reuses the KV cache
    # for the prompt prefix shared with the previous generation, so each run
    # follows the same kind of generation as in the trials (a chat after a
    # background run and vice versa): a repeated prompt would be almost free.
    chats: list[Timed] = []
    for _ in range(3):
        await timed(runner.generate(request("a", BACKGROUND, 8), CancelToken()))
        chats.append(await timed(runner.generate(request("a", CHAT, CHAT_TOKENS), CancelToken())))
    chat_ttft_ms = statistics.median((c.times[0] - c.started) * 1e3 for c in chats)
    reference = await timed(runner.generate(request("a", BACKGROUND, total), CancelToken()))
    assert runner.last_stats is not None
    fresh_prefill_ms = runner.last_stats.prefill_seconds * 1e3
    interval = reference.interval
    console.print(
        f"token interval {interval * 1e3:.1f} ms ({1 / interval:.0f} tokens/s); "
        f"idle chat TTFT {chat_ttft_ms:.0f} ms",
        style="dim",
    )

    # 1 + 4. One scheduler for all trials; the background job is re-queued and
    # completes inside each trial.
    clock = Tap(runner)
    trials: list[Trial] = []
    async with Scheduler(clock) as sched:
        for i in range(args.trials):
            point = rng.randint(1, total - 20)
            phase = rng.random()
            trial = await preemption_trial(
                sched,
                clock,
                runner,
                total,
                point,
                phase,
                interval,
                reference.text,
                chats[0].text,
            )
            trials.append(trial)
            console.print(
                f"preemption {i + 1}/{args.trials}: at token {point}+{phase:.2f}, "
                f"stop {trial.stop_ms:.1f} ms, first token {trial.first_token_ms:.1f} ms",
                style="dim",
            )
        preemption_stats = asdict(sched.stats)

    # 2. Interleaved A/B pairs, alternating which goes first (A B, B A, ...).
    # Short runs and many pairs: the machine's noise comes in bursts of
    # seconds, which then hit one run of a pair, and the median drops them.
    req = request("a", BACKGROUND, args.throughput_tokens)
    bare: list[Run] = []
    through: list[Run] = []
    tap = Tap(runner)
    async with Scheduler(tap) as sched:
        for i in range(args.pairs):
            if i % 2 == 0:
                bare.append(await bare_rate(runner, req))
                through.append(await scheduled_rate(sched, tap, req))
            else:
                through.append(await scheduled_rate(sched, tap, req))
                bare.append(await bare_rate(runner, req))
            console.print(
                f"throughput pair {i + 1}/{args.pairs}: bare {bare[-1].tokens_per_s:.2f}, "
                f"scheduler {through[-1].tokens_per_s:.2f} tokens/s",
                style="dim",
            )
    bare_rates = [b.tokens_per_s for b in bare]
    through_rates = [t.tokens_per_s for t in through]
    shares = [t / b for t, b in zip(through_rates, bare_rates, strict=True)]
    bare_cpu = statistics.median(b.loop_cpu_us_per_token for b in bare)
    through_cpu = statistics.median(t.loop_cpu_us_per_token for t in through)

    # 3.
    swaps = await swap_times(runner, args.swaps)
    await runner.aclose()

    def latency(field: str) -> dict[str, float]:
        """p50/p99 in ms, and in token intervals: each trial's latency over its
        own token interval (the machine's speed drifts over minutes)."""
        values_ms = [getattr(t, field) for t in trials]
        ratios = [getattr(t, field) / t.interval_ms for t in trials]
        return {
            "p50_ms": statistics.median(values_ms),
            "p99_ms": pct(values_ms, 99),
            "p50_intervals": statistics.median(ratios),
            "p99_intervals": pct(ratios, 99),
        }

    full_run_s = reference.seconds
    saved = [
        (t.partial_tokens * t.interval_ms - (t.resumed_prefill_ms - fresh_prefill_ms)) / 1e3
        for t in trials
    ]
    return {
        "token_interval_ms": interval * 1e3,
        "tokens_per_s": 1 / interval,
        "first_load_ms": first_load_ms,
        "idle_chat_ttft_ms": chat_ttft_ms,
        "preemption": {
            "trials": len(trials),
            "interval_ms_p50": statistics.median(t.interval_ms for t in trials),
            "decision": latency("decision_ms"),
            "stop": latency("stop_ms"),
            "requeue": latency("requeue_ms"),
            "chat_start": latency("chat_start_ms"),
            "first_token": latency("first_token_ms"),
            "chat_own_ttft_ms_p50": statistics.median(
                t.first_token_ms - t.chat_start_ms for t in trials
            ),
            "resume_exact": sum(t.resume_exact for t in trials),
            "chat_exact": sum(t.chat_exact for t in trials),
            "scheduler_stats": preemption_stats,
        },
        "throughput": {
            "tokens_per_run": args.throughput_tokens,
            "pairs": args.pairs,
            "bare_tokens_per_s": bare_rates,
            "scheduler_tokens_per_s": through_rates,
            "share_median": statistics.median(shares),
            "share_mean": statistics.mean(shares),
            # 95 % interval of the mean ratio: how far machine noise alone moves it.
            "share_mean_ci95": 1.96 * statistics.stdev(shares) / math.sqrt(len(shares)),
            "share_of_sums": sum(through_rates) / sum(bare_rates),
            "loop_cpu_us_per_token_bare": bare_cpu,
            "loop_cpu_us_per_token_scheduler": through_cpu,
            # Even if the scheduler's extra CPU per token delayed every token
            # (it overlaps the decode in the worker instead):
            "cpu_bound_share": interval * 1e6 / (interval * 1e6 + max(0.0, through_cpu - bare_cpu)),
            "runner_share_of_scheduled_runs": [t.runner_share for t in through],
            "runner_share_min": min(t.runner_share for t in through),
            "runner_share_median": statistics.median(t.runner_share for t in through),
            "target": TARGET_SHARE,
            "target_met": verdict(shares),
        },
        "swaps_ms": {
            pair: {"p50": statistics.median(v), "max": max(v), "n": len(v)}
            for pair, v in swaps.items()
            if v
        },
        "resume_vs_restart": {
            "tokens_kept_p50": statistics.median(t.partial_tokens for t in trials),
            "tokens_kept_total": sum(t.partial_tokens for t in trials),
            "tokens_discarded_total": sum(t.discarded_tokens for t in trials),
            "fresh_prefill_ms": fresh_prefill_ms,
            "resumed_prefill_ms_p50": statistics.median(t.resumed_prefill_ms for t in trials),
            "full_run_s": full_run_s,
            "resumed_run_s_p50": statistics.median(t.resumed_run_s for t in trials),
            # Measured: a restart's second run is a full run (timed once, at the
            # start); the resume's is the run after the chat. Noisy: minutes apart.
            "measured_time_saved_s_p50": statistics.median(
                full_run_s - t.resumed_run_s for t in trials
            ),
            # Per trial, from that trial's own figures: the decode time a
            # restart would spend regenerating the kept tokens, minus the longer
            # prompt evaluation the resume pays for them.
            "time_saved_s_p50": statistics.median(saved),
            "time_saved_s_total": sum(saved),
        },
        "trials": [asdict(t) for t in trials],
    }


def run_large(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = load_now()
    with tempfile.TemporaryDirectory(prefix="tierlm-bench-") as tmp:
        directory = args.models or Path(tmp)
        a = directory / f"tiny-{PRESET}-a.gguf"
        b = directory / f"tiny-{PRESET}-b.gguf"
        if not (a.exists() and b.exists()):
            console.print(f"writing two '{PRESET}' models to {directory}", style="dim")
            a, b = write_model_pair(directory, preset=PRESET)
        model_bytes = a.stat().st_size
        results = asyncio.run(bench(args, (a, b)))
    seconds = time.perf_counter() - started
    load_after = load_now()
    print_table(results, seconds, (load_before, load_after))
    config = PRESETS[PRESET]
    return {
        "model": {
            "preset": PRESET,
            "layers": config.n_layers,
            "hidden": config.hidden,
            "dtype": config.dtype,
            "bytes": model_bytes,
            "n_threads": THREADS,
        },
        "load_before": load_before,
        "load_after": load_after,
        "seconds": seconds,
        "results": results,
    }
