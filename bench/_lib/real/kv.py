"""bench/real_model.py's KV-snapshot sections on SmolLM2-135M-Instruct (Q4_1).

docs/design.md §4.9; the targets of the issue "Zero-loss
preemption":

``resume``: a long-prompt generation (~1 500 tokens) is preempted after a few
tokens, a chat runs, and the generation resumes. Measured per trial, caller
side: the fresh run's time to its first token (its prompt evaluation) and the
resumed run's time from the resume call to its next token; target: the median
ratio <= 0.2. The same with ``kv_pool_bytes=0`` (re-evaluation), for contrast.
Also reported: the state's bytes and the time to save and restore it, and
(short prompts, 20 preemption points each) how often the resumed greedy text
equals the uninterrupted one, with KV restore and with re-evaluation.

``chats``: ``streams`` background agents (long system prompts, rounds of 64
tokens) through the real ``Scheduler``, on three runners: without chats, with a
chat every ``chat_every`` s and the KV pool on, and with it off; taken in turns
of ``chat_every`` s (one chat in the middle of each) for ``seconds`` each. Target: background
tokens/s with chats >= 0.9 x (tokens/s without chats) x (1 - the chats' own
share of device time).
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from tierlm import JobCompleted, JobEvent, JobStarted, Scheduler, SchedulerEvent
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.llama_cpp import RUN_AHEAD, LlamaCppRunner, LlamaModelSpec
from tierlm.runners.llama_cpp.model.capacity import DEFAULT_KV_POOL_BYTES
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

__all__ = ["CHATS_TARGET", "RESUME_TARGET", "chats", "resume"]

MODEL = "smollm2"
RESUME_TARGET = 0.2
CHATS_TARGET = 0.9
MODES = {"kv restore": DEFAULT_KV_POOL_BYTES, "re-evaluation": 0}
PARAGRAPH = (
    "The harbour town kept its records in a ledger of green leather: every ship, "
    "every cargo of salt and wool, every storm that closed the port for a week. "
)
CHAT = [{"role": "user", "content": "hi! what time is it in Lisbon?"}]


def _runner(path: Path, threads: int, pool: int) -> LlamaCppRunner:
    spec = LlamaModelSpec(path, n_threads=threads, n_ctx=4096)
    return LlamaCppRunner({MODEL: spec}, kv_pool_bytes=pool)


def _request(
    messages: list[dict[str, str]], max_tokens: int, resume: str = ""
) -> GenerationRequest:
    return GenerationRequest(
        model_id=MODEL, messages=messages, max_tokens=max_tokens, temperature=0.0,
        resume_text=resume,
    )  # fmt: skip


async def _timed(
    runner: LlamaCppRunner, request: GenerationRequest, preempt_after: int = 0
) -> tuple[list[str], float]:
    """The pieces, and the time from the call to the first piece."""
    loop = asyncio.get_running_loop()
    token = CancelToken()
    pieces: list[str] = []
    started = loop.time()
    first = float("nan")
    async for piece in runner.generate(request, token):
        if not pieces:
            first = loop.time() - started
        pieces.append(piece)
        if len(pieces) == preempt_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces, first


async def _long_messages(runner: LlamaCppRunner, trial: int, tokens: int) -> list[dict[str, str]]:
    """A prompt of about ``tokens`` tokens that shares no prefix with other trials'."""
    paragraphs = 1
    while True:
        messages = [
            {"role": "system", "content": f"Trial {trial}. " + PARAGRAPH * paragraphs},
            {"role": "user", "content": "Tell the story of the ledger."},
        ]
        count = await runner.count_prompt_tokens(_request(messages, 1))
        if count >= tokens:
            return messages
        paragraphs = max(paragraphs + 1, paragraphs * tokens // max(count, 1))


async def _exactness(runner: LlamaCppRunner, points: int) -> int:
    """Resumed text == uninterrupted text, at ``points`` preemption points."""
    story = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    total = 40

    async def elsewhere() -> None:  # fresh runs never find their prompt cached
        await _timed(runner, GenerationRequest(model_id=MODEL, prompt="Hi", max_tokens=2))

    await elsewhere()
    full, _ = await _timed(runner, _request(story, total))
    rng = random.Random(5)
    exact = 0
    for _ in range(points):
        after = rng.randint(1, total - RUN_AHEAD - 2)
        await elsewhere()
        partial, _ = await _timed(runner, _request(story, total), preempt_after=after)
        await elsewhere()
        rest, _ = await _timed(runner, _request(story, total - len(partial), "".join(partial)))
        exact += partial + rest == full
    return exact


async def resume(
    path: Path, *, trials: int, prompt_tokens: int, threads: int, console: Console
) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens_target": prompt_tokens, "trials": trials}
    for mode, pool in MODES.items():
        runner = _runner(path, threads, pool)
        await runner.load(MODEL)
        rows: list[dict[str, float]] = []
        for trial in range(trials):
            messages = await _long_messages(runner, trial, prompt_tokens)
            after = 8
            partial, fresh = await _timed(runner, _request(messages, 40), preempt_after=after)
            stopped = runner.last_stats
            assert stopped is not None
            await _timed(runner, _request(CHAT, 16))  # the chat that preempted it
            _, resumed = await _timed(
                runner, _request(messages, 40 - len(partial), "".join(partial))
            )
            stats = runner.last_stats
            assert stats is not None
            rows.append(
                {
                    "prompt_tokens": stopped.prompt_tokens,
                    "fresh_first_token_s": fresh,
                    "resume_next_token_s": resumed,
                    "ratio": resumed / fresh,
                    "saved_state_bytes": stopped.saved_state_bytes,
                    "save_s": stopped.save_seconds,
                    "restore_s": stats.restore_seconds,
                    "evaluated_tokens": stats.evaluated_tokens,
                }
            )
            console.print(
                f"resume ({mode}) {trial + 1}/{trials}: fresh {fresh * 1e3:.0f} ms, "
                f"resume -> next token {resumed * 1e3:.0f} ms ({stats.resumed_from}, "
                f"{stats.evaluated_tokens} tokens evaluated)",
                style="dim",
            )
        exact = await _exactness(runner, 20)
        await runner.aclose()

        def p50(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        out[mode] = {
            "fresh_first_token_ms_p50": p50("fresh_first_token_s") * 1e3,
            "resume_next_token_ms_p50": p50("resume_next_token_s") * 1e3,
            "ratio_p50": p50("ratio"),
            "evaluated_tokens_p50": p50("evaluated_tokens"),
            "saved_state_bytes_p50": p50("saved_state_bytes"),
            "save_ms_p50": p50("save_s") * 1e3,
            "restore_ms_p50": p50("restore_s") * 1e3,
            "resume_exact": f"{exact}/20",
            "rows": rows,
        }
    ratio = out["kv restore"]["ratio_p50"]
    out["target"] = RESUME_TARGET
    out["target_met"] = "met" if ratio <= RESUME_TARGET else "NOT met"
    return out


async def _segment(
    runner: LlamaCppRunner, *, seconds: float, streams: int, chat_at: float | None
) -> dict[str, Any]:
    """``streams`` agents for ``seconds`` on a fresh Scheduler; one chat at
    ``chat_at`` s. Background tokens count only inside the segment."""
    loop = asyncio.get_running_loop()
    tokens = 0
    chat_busy = 0.0
    chat_started: dict[int, float] = {}
    ttfts: list[float] = []

    def listen(event: SchedulerEvent) -> None:
        nonlocal chat_busy
        if not isinstance(event, JobEvent) or event.job.class_name != "chat":
            return
        job = event.job
        if isinstance(event, JobStarted):
            chat_started[job.id] = event.time
        elif isinstance(event, JobCompleted) and job.id in chat_started:
            chat_busy += event.time - chat_started.pop(job.id)

    async with Scheduler(runner) as sched:
        sched.add_listener(listen)
        end = loop.time() + seconds

        async def agent(i: int) -> None:
            nonlocal tokens
            system = {"role": "system", "content": f"Agent {i}. " + PARAGRAPH * 6}
            for n in range(1, 1_000_000):
                messages = [system, {"role": "user", "content": f"Write entry {n} of the ledger."}]
                async for _ in sched.generate("nataraj", MODEL, messages, 64, producer=f"a{i}"):
                    if loop.time() < end:
                        tokens += 1

        async def person(at: float) -> None:
            await asyncio.sleep(at)
            sent = loop.time()
            async for _ in sched.generate("chat", MODEL, CHAT, 24):
                if len(ttfts) == 0:
                    ttfts.append(loop.time() - sent)

        agents = [asyncio.create_task(agent(i)) for i in range(streams)]
        chatting = asyncio.create_task(person(chat_at)) if chat_at is not None else None
        await asyncio.sleep(seconds)
        if chatting is not None:
            await chatting
        for task in agents:
            task.cancel()
        await asyncio.gather(*agents, return_exceptions=True)
        preemptions = sched.stats.preemptions
    return {
        "tokens": tokens,
        "chat_device_s": chat_busy,
        "ttfts": ttfts,
        "preemptions": preemptions,
    }


async def chats(
    path: Path, *, seconds: float, streams: int, chat_every: float, threads: int, console: Console
) -> dict[str, Any]:
    """Three runners side by side (no chats; chats with KV restore; chats with
    re-evaluation), in segments of ``chat_every`` s taken in turn, so that the
    machine's drifting load hits all three alike."""
    modes: dict[str, tuple[int, bool]] = {
        "no chats": (DEFAULT_KV_POOL_BYTES, False),
        "chats, kv restore": (MODES["kv restore"], True),
        "chats, re-evaluation": (MODES["re-evaluation"], True),
    }
    runners = {name: _runner(path, threads, pool) for name, (pool, _) in modes.items()}
    for runner in runners.values():
        await runner.load(MODEL)
    totals = {
        name: {"tokens": 0, "chat_device_s": 0.0, "ttfts": [], "preemptions": 0} for name in modes
    }
    segments = max(1, round(seconds / chat_every))
    for i in range(segments):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for name in order:
            chat_at = chat_every / 2 if modes[name][1] else None
            seg = await _segment(
                runners[name], seconds=chat_every, streams=streams, chat_at=chat_at
            )
            total = totals[name]
            total["tokens"] += seg["tokens"]
            total["chat_device_s"] += seg["chat_device_s"]
            total["ttfts"] += seg["ttfts"]
            total["preemptions"] += seg["preemptions"]
        console.print(
            f"chats section, segment {i + 1}/{segments}: "
            + ", ".join(f"{n} {totals[n]['tokens']} tokens" for n in modes),
            style="dim",
        )
    window = segments * chat_every
    runs: dict[str, Any] = {}
    for name, total in totals.items():
        ttfts = total.pop("ttfts")
        pool = runners[name].kv_pool
        runs[name] = {
            **total,
            "background_tokens_per_s": total["tokens"] / window,
            "chats": len(ttfts),
            "chat_ttft_ms_p50": statistics.median(ttfts) * 1e3 if ttfts else None,
            "pool": None if pool is None else asdict(pool),
        }
        await runners[name].aclose()
    base = runs["no chats"]["background_tokens_per_s"]
    for name in ("chats, kv restore", "chats, re-evaluation"):
        run = runs[name]
        expected = base * (1 - run["chat_device_s"] / window)
        run["share_of_expected"] = run["background_tokens_per_s"] / expected if expected else None
    share = runs["chats, kv restore"]["share_of_expected"]
    return {
        "seconds": window,
        "streams": streams,
        "chat_every_s": chat_every,
        "runs": runs,
        "target": CHATS_TARGET,
        "target_met": "met" if share is not None and share >= CHATS_TARGET else "NOT met",
    }
