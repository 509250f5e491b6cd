"""The device's sizes, known before any model loads: how many slots to run
llama.cpp with when nobody said (docs/design.md §2.8), what a
step of n sequences costs (``CPU_STEP_COST``), and the KV snapshot pool's
default bound.

``DEFAULT_SLOTS`` (8) is where doubling the batch stops paying on the CPUs
measured here; but k slots hold k contexts of KV, and a token's KV depends on
the model (``gguf_header``). So the default is 8 when the KV of 8 full
contexts of every configured model fits in ``KV_MEMORY_SHARE`` of the
machine's memory, else the largest power of two below that does (at least 1),
as Ollama picks its parallel requests from the memory free.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from tierlm.runners.llama_cpp.model.gguf_header import GgufError, kv_shape
from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec

__all__ = [
    "CPU_STEP_COST",
    "DEFAULT_KV_POOL_BYTES",
    "DEFAULT_SLOTS",
    "KV_MEMORY_SHARE",
    "SlotChoice",
    "auto_slots",
    "physical_memory",
]

logger = logging.getLogger("tierlm.runners.llama_cpp")

DEFAULT_SLOTS = 8
"""The slots to deploy llama.cpp with when batching (docs/design.md §2): the
last doubling of k that still gains >= 1.4x aggregate tokens/s at the default
thread count on the curve measured on a quiet machine here (2 threads 96 -> 142
tokens/s for k = 4 -> 8, 1.48x; 8 -> 16 gains 1.35x for twice the KV memory),
and what bench/results/batched_decode.json shows here. ``LlamaCppRunner``'s
own default stays 1 (one at a time) until the shell runs several generations
at once."""
DEFAULT_KV_POOL_BYTES = 512 * 2**20
"""512 MiB: ~22 000 tokens of SmolLM2-135M state (~23 KB a token), e.g. a
dozen preempted 1 500-token agent prompts."""


def _step_cost(aggregate: dict[int, float], slots: int) -> tuple[float, ...]:
    """Relative step time for n = 1..slots from aggregate tokens/s at some k,
    interpolated linearly in between (and extrapolated past the last k)."""
    points = sorted(aggregate.items())
    costs = []
    for n in range(1, slots + 1):
        lo = max((p for p in points if p[0] <= n), default=points[0])
        hi = min((p for p in points if p[0] >= n), default=points[-1])
        if hi[0] == lo[0]:
            rate = lo[1] if n <= points[-1][0] else points[-1][1]
        else:
            rate = lo[1] + (hi[1] - lo[1]) * (n - lo[0]) / (hi[0] - lo[0])
        costs.append(n * aggregate[1] / rate)
    return tuple(costs)


CPU_STEP_COST = _step_cost({1: 73.7, 2: 92.4, 4: 112.1, 8: 146.1, 16: 158.4}, 256)
"""The step time of n sequences relative to one on these machines' CPUs (2
threads, SmolLM2-135M Q4_1, OpenMP waits as the worker's, docs/design.md §1;
``bench/batched_decode.py`` raw curve: 73.7, 92.4, 112.1, 146.1, 158.4 tokens/s
for k = 1, 2, 4, 8, 16): 1.0, 1.6, 2.6, 4.0, 7.4. (With passive waits one
sequence ran at 33 tokens/s and the curve was 1.0, 1.12, 1.38, 1.86, 2.75: the
guard let background beside a chat that now slows it past ``chat_slowdown``.)
The chat latency guard reads it (docs/design.md §4.7); a GPU's curve is
flatter, so on one the guard cuts more than it must, never less."""


KV_MEMORY_SHARE = 0.25
"""The part of physical memory the slots' KV may take by default: the rest is
for the weights (a 7B Q4 model is ~4 GB), the KV snapshot pool (512 MiB by
default), the gateway and whatever else runs on the machine. SmolLM2-135M
takes 377 MB for 8 contexts of 2048 tokens; a 7B model without grouped-query
attention (512 KB a token) gets 2 slots of 4096 tokens on 24 GB."""


@dataclass(frozen=True, slots=True)
class SlotChoice:
    """The slots chosen and why, for the gateway's start-up line."""

    slots: int
    reason: str


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def auto_slots(
    specs: Mapping[str, LlamaModelSpec], memory: int | None = None, *, ceiling: int = DEFAULT_SLOTS
) -> SlotChoice:
    """``ceiling`` slots, halved until ``ceiling`` x ``n_ctx`` tokens of each
    model's KV fits ``KV_MEMORY_SHARE`` of ``memory`` (this machine's by
    default). One slot where a model's header cannot be read or the memory
    is unknown: one at a time is never the wrong size."""
    memory = physical_memory() if memory is None else memory
    if memory is None:
        return SlotChoice(1, "the machine's memory is unknown")
    need = 0
    for model_id, spec in specs.items():
        try:
            per_token = kv_shape(spec.path).bytes_per_token
        except (OSError, GgufError) as exc:
            logger.info("one slot: the KV size of model %r is unknown (%s)", model_id, exc)
            return SlotChoice(1, f"the KV size of model {model_id!r} is unknown")
        need = max(need, per_token * spec.n_ctx)
    budget = memory * KV_MEMORY_SHARE
    slots = ceiling
    while slots > 1 and slots * need > budget:
        slots //= 2
    mib = slots * need / 2**20
    share = f"{KV_MEMORY_SHARE:.0%} of {memory / 2**30:.1f} GiB of memory"
    if need > budget:
        # One context does not fit the share either: say so, not "within"
        # (docs/design.md §2.8). One slot is the least; the n_ctx is too big.
        return SlotChoice(
            1,
            f"1 x {mib:.0f} MiB of KV a context, over {share} "
            f"({budget / 2**20:.0f} MiB): one slot, the least; a smaller n_ctx fits more",
        )
    return SlotChoice(
        slots,
        f"{slots} x {mib / slots:.0f} MiB of KV a context = {mib:.0f} MiB, within {share}",
    )
