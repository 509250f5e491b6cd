"""The simulator's workloads by name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tierlm.sim.workload import Workload
from tierlm.sim.workloads.azure_chat import AzureChat
from tierlm.sim.workloads.azure_pool import AzurePool
from tierlm.sim.workloads.backfill_flood import BackfillFlood
from tierlm.sim.workloads.chat_idle import ChatIdle
from tierlm.sim.workloads.fair_pool import FairPool
from tierlm.sim.workloads.frequent_chat import FrequentChat
from tierlm.sim.workloads.issue118 import Issue118
from tierlm.sim.workloads.many_producers import ManyProducers
from tierlm.sim.workloads.mixed_models import MixedModels
from tierlm.sim.workloads.model_cases import ChatCrowd, ChatOverBackfill, FourModels, TwoModelAgents
from tierlm.sim.workloads.pool_cases import (
    DeadlineAbuse,
    GanasVsNataraj,
    LongPrompt,
    OneAtATime,
    OverdueFlood,
    Swarm,
    TwoSizes,
)
from tierlm.sim.workloads.sessions import Sessions

__all__ = ["CASES", "WORKLOADS", "get_workload"]

WORKLOADS: dict[str, type[Workload]] = {
    w.name: w
    for w in (
        Issue118,
        BackfillFlood,
        FairPool,
        MixedModels,
        AzureChat,
        AzurePool,
        FrequentChat,
        DeadlineAbuse,
        OverdueFlood,
        Swarm,
        GanasVsNataraj,
        OneAtATime,
        TwoSizes,
        ChatIdle,
        LongPrompt,
        ManyProducers,
        TwoModelAgents,
        FourModels,
        ChatCrowd,
        ChatOverBackfill,
        Sessions,
    )
}

CASES: tuple[str, ...] = (
    DeadlineAbuse.name,
    OverdueFlood.name,
    Swarm.name,
    GanasVsNataraj.name,
    OneAtATime.name,
    TwoSizes.name,
    ChatIdle.name,
    LongPrompt.name,
    TwoModelAgents.name,
    FourModels.name,
    ChatCrowd.name,
    ChatOverBackfill.name,
)
"""The adversarial cases of docs/design.md §8, each with its story (``Workload.story``)."""


def get_workload(
    name: str, *, trace: Path | None = None, params: Mapping[str, float] | None = None
) -> Workload:
    """A workload by name, with its ``parameters`` set from ``params``.

    ``azure-chat`` and ``azure-pool`` read their trace now (clear error if a named file is missing).
    """
    cls = WORKLOADS.get(name)
    if cls is None:
        raise ValueError(f"workload: unknown {name!r}; known: {', '.join(WORKLOADS)}")
    params = dict(params or {})
    unknown = sorted(set(params) - set(cls.parameters))
    if unknown:
        known = ", ".join(cls.parameters) or "none"
        raise ValueError(
            f"workload {name}: unknown parameter(s) {', '.join(unknown)}; known: {known}"
        )
    if cls is AzureChat or cls is AzurePool:
        return cls(trace, **params)
    return cls(**params)
