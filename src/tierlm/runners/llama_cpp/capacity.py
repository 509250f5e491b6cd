"""How many slots to run llama.cpp with when nobody said (docs/design.md §2
"How many slots").

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

from tierlm.runners.llama_cpp.batch import DEFAULT_SLOTS
from tierlm.runners.llama_cpp.gguf_header import GgufError, kv_shape
from tierlm.runners.llama_cpp.spec import LlamaModelSpec

__all__ = ["KV_MEMORY_SHARE", "SlotChoice", "auto_slots", "physical_memory"]

logger = logging.getLogger("tierlm.runners.llama_cpp")

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
    return SlotChoice(
        slots,
        f"{slots} x {mib / slots:.0f} MiB of KV a context = {mib:.0f} MiB, within "
        f"{KV_MEMORY_SHARE:.0%} of {memory / 2**30:.1f} GiB of memory",
    )
