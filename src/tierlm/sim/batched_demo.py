"""``tierlm demo``'s batched-device table: one slot against k, side by side
(docs/design.md §4.7).

The agents workload: ``agents`` background agents (each its own producer) that
each stream ``tokens`` tokens at once, on the simulated device with the
measured llama.cpp batch curve; after a while a person sends a chat. Per slot
count: how long the agents' work takes (and the throughput against one slot),
how many decode steps the chat's first token waits behind the batch, the
chat's speed against running alone. The real Scheduler, in virtual time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table

from tierlm.core.config import SchedulerConfig
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import LLAMA_CPP_CPU_BATCH_COST, SimulatedRunner
from tierlm.shell.scheduler import Scheduler
from tierlm.testing.virtual import run_virtual

__all__ = ["BatchedRow", "batched_rows", "batched_table"]

TOKEN = 1 / 15  # the demo's phone-class device: 15 tokens/s for one sequence
AGENTS = 16
TOKENS = 300
CHAT_AT = 5.0  # seconds after the agents start
CHAT_TOKENS = 60


@dataclass(frozen=True, slots=True)
class BatchedRow:
    slots: int
    seconds: float
    """Until every agent's stream ended."""
    chat_steps: int
    """Tokens any agent made between the chat's arrival and its first token."""
    chat_speed: float
    """The chat's tokens/s over its tokens/s alone."""


def _runner(slots: int) -> SimulatedRunner:
    return SimulatedRunner(
        token_interval=TOKEN,
        initial_model="m1",
        slots=slots,
        batch_cost=LLAMA_CPP_CPU_BATCH_COST,
    )


async def _chat(
    sched: Scheduler, on_first: Callable[[], None] | None = None
) -> tuple[float, float]:
    first: float | None = None
    tokens = 0
    async for _piece in sched.generate(
        "chat", model_id="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=CHAT_TOKENS
    ):
        tokens += 1
        if first is None:
            first = sched.now()
            if on_first is not None:
                on_first()
    assert first is not None
    return first, (tokens - 1) / (sched.now() - first)


async def _row(slots: int, alone: float) -> BatchedRow:
    async with Scheduler(_runner(slots), config=SchedulerConfig()) as sched:
        counts: Counter[int] = Counter()
        handles = []
        for i in range(AGENTS):
            request = GenerationRequest(model_id="m1", prompt=f"agent {i}", max_tokens=TOKENS)

            def count(_piece: str, i: int = i) -> None:
                counts[i] += 1

            handles.append(sched.submit_generation("nataraj", request, count, f"agent{i}"))
        start = sched.now()
        await asyncio.sleep(CHAT_AT)
        at_chat = Counter(counts)
        seen: list[int] = []

        def first_token() -> None:
            seen.append(max(counts[i] - at_chat[i] for i in range(AGENTS)))

        _first, speed = await _chat(sched, first_token)
        await asyncio.gather(*handles)
        return BatchedRow(slots, sched.now() - start, seen[0], speed / alone)


def batched_rows(slot_counts: Sequence[int] = (1, 4, 8)) -> list[BatchedRow]:
    async def alone() -> float:
        async with Scheduler(_runner(1)) as sched:
            return (await _chat(sched))[1]

    solo = run_virtual(alone())
    return [run_virtual(_row(k, solo)) for k in slot_counts]


def batched_table(rows: Sequence[BatchedRow]) -> Table:
    table = Table(
        title=f"A batched device (docs/design.md §4.7): {AGENTS} agents x {TOKENS} tokens, "
        f"then a chat; step cost 1 + {LLAMA_CPP_CPU_BATCH_COST:g} (k - 1)",
        box=box.SIMPLE_HEAD,
    )
    for name in ("slots", "agents done", "throughput", "chat 1st token", "chat speed"):
        table.add_column(name, justify="right")
    base = rows[0].seconds if rows else 1.0
    for row in rows:
        table.add_row(
            str(row.slots),
            f"{row.seconds:.0f} s",
            f"{base / row.seconds:.1f}x",
            f"{row.chat_steps} steps",
            f"{row.chat_speed:.2f} of alone",
        )
    return table
