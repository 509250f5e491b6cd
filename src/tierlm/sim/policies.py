"""The five policies the simulator compares, by name, and how each treats work.

``resumes``: whether a preempted generate-style job (a chat, a Nataraj card)
keeps its tokens and continues from prompt + partial output (docs/design.md §4
re-queue, §6.8: tierlm's ``Scheduler.generate``), or restarts from scratch as
the seed does ("re-queued ... so it runs again later from scratch"). Every
baseline restarts. For ``strict-priority`` that is the
app-level view: vLLM's own recompute preemption keeps the request's generated
tokens and recomputes their KV cache, i.e. it resumes; its wasted time here is
therefore an upper bound for vLLM itself. Closure jobs (extraction, Gana
rounds) restart under every policy. The simulator's jobs model this themselves
(``tierlm.sim.engine``); the shell is the same for all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tierlm.core.classes import TaskClass, default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.policy import Policy
from tierlm.core.tiered import TieredPolicy
from tierlm.sim.baselines import (
    FifoPolicy,
    SeedLiteralPolicy,
    StrictPriorityPolicy,
    TwoLanePolicy,
)

__all__ = ["POLICIES", "PolicySpec", "make_policy", "parse_policy_names"]

Factory = Callable[[Mapping[str, TaskClass], SchedulerConfig], Policy]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    factory: Factory
    resumes: bool
    summary: str


POLICIES: dict[str, PolicySpec] = {
    spec.name: spec
    for spec in (
        PolicySpec(
            "tierlm",
            lambda classes, config: TieredPolicy(classes, config),
            resumes=True,
            summary="tiers, foreground, EDF, budget, CFS per producer, affinity (design §4)",
        ),
        PolicySpec(
            "fifo",
            lambda classes, _config: FifoPolicy(classes),
            resumes=False,
            summary="one FIFO queue, no preemption (Ollama-like)",
        ),
        PolicySpec(
            "two-lane",
            lambda classes, _config: TwoLanePolicy(classes),
            resumes=False,
            summary="the seed's old runHigh/runLow queue; Nataraj on the high lane",
        ),
        PolicySpec(
            "strict-priority",
            lambda classes, _config: StrictPriorityPolicy(classes),
            resumes=False,
            summary="priority by class with preemption (vLLM's priority policy)",
        ),
        PolicySpec(
            "seed-literal",
            lambda classes, _config: SeedLiteralPolicy(classes),
            resumes=False,
            summary="the seed's pseudocode, line by line",
        ),
    )
}


def make_policy(
    name: str,
    classes: Mapping[str, TaskClass] | None = None,
    config: SchedulerConfig | None = None,
) -> Policy:
    """A fresh policy by name (``POLICIES``), with the default classes if None."""
    spec = POLICIES.get(name)
    if spec is None:
        raise ValueError(f"policy: unknown {name!r}; known: {', '.join(POLICIES)}")
    return spec.factory(
        classes if classes is not None else default_classes(), config or SchedulerConfig()
    )


def parse_policy_names(text: str) -> list[str]:
    """``"tierlm,fifo"`` -> ``["tierlm", "fifo"]``, checked, duplicates dropped."""
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in POLICIES:
            raise ValueError(f"policy: unknown {name!r}; known: {', '.join(POLICIES)}")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"policies: give at least one of {', '.join(POLICIES)}")
    return names
