"""The simulator's workloads by name."""

from __future__ import annotations

from pathlib import Path

from tierlm.sim.workload import Workload
from tierlm.sim.workloads.azure_chat import AzureChat
from tierlm.sim.workloads.backfill_flood import BackfillFlood
from tierlm.sim.workloads.fair_pool import FairPool
from tierlm.sim.workloads.issue118 import Issue118
from tierlm.sim.workloads.mixed_models import MixedModels

__all__ = ["WORKLOADS", "get_workload"]

WORKLOADS: dict[str, type[Workload]] = {
    w.name: w for w in (Issue118, BackfillFlood, FairPool, MixedModels, AzureChat)
}


def get_workload(name: str, *, trace: Path | None = None) -> Workload:
    """A workload by name. ``azure-chat`` reads its trace now (clear error if missing)."""
    if name not in WORKLOADS:
        raise ValueError(f"workload: unknown {name!r}; known: {', '.join(WORKLOADS)}")
    if name == AzureChat.name:
        return AzureChat(trace)
    return WORKLOADS[name]()
