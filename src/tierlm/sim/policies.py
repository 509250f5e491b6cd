"""The policies the simulator compares, by name, and how each treats work.

A column of a comparison is a policy and whether its preempted jobs RESUME:

- resume: a generation (a chat turn, a Nataraj card) continues from prompt +
  partial output (``Scheduler.submit_generation``), and a closure job (an
  extraction, a Gana round) is re-run with its journal, so its finished
  ``ctx.generate`` calls replay for free and the interrupted one continues
  (docs/design.md §4.9). What the interrupted
  call still costs is the device's (``DeviceModel.resume``: re-evaluate, or
  restore a KV snapshot).
- restart: every preempted job runs again from scratch, as the seed does
  ("re-queued ... so it runs again later from scratch").

tierlm resumes; every baseline restarts. ``<policy>+resume`` is a baseline
whose jobs resume on the same device, and ``tierlm+restart`` tierlm without
zero-loss preemption, so that a table never credits the policy for what only
the runner and the journal do. For ``strict-priority`` restart is the
app-level view: vLLM's own recompute preemption keeps the generated tokens and
re-evaluates them (``strict-priority+resume`` on a ``re-evaluate`` device).
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

__all__ = [
    "DEFAULT_COLUMNS",
    "POLICIES",
    "Column",
    "PolicySpec",
    "column",
    "make_policy",
    "parse_policy_names",
]

Factory = Callable[[Mapping[str, TaskClass], SchedulerConfig], Policy]
RESUME = "+resume"
RESTART = "+restart"


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    factory: Factory
    resumes: bool
    """Whether its jobs resume unless the column says otherwise."""
    summary: str


POLICIES: dict[str, PolicySpec] = {
    spec.name: spec
    for spec in (
        PolicySpec(
            "tierlm",
            lambda classes, config: TieredPolicy(classes, config),
            resumes=True,
            summary="tiers, foreground, EDF, budget, fair pool, affinity (design §4)",
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


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a comparison: a policy, and whether its jobs resume."""

    name: str
    policy: PolicySpec
    resumes: bool

    @property
    def summary(self) -> str:
        if self.resumes == self.policy.resumes:
            return self.policy.summary
        how = "jobs resume (journal, device's resume cost)" if self.resumes else "jobs restart"
        return f"{self.policy.summary}; {how}"


# The baselines that preempt appear twice, restarting and resuming: the
# difference is the runner's and the journal's, not the policy's. FIFO and
# two-lane never preempt, so resuming changes nothing for them.
DEFAULT_COLUMNS: tuple[str, ...] = (
    "tierlm",
    "fifo",
    "two-lane",
    "strict-priority",
    "strict-priority+resume",
    "seed-literal",
    "seed-literal+resume",
)


def column(name: str) -> Column:
    """``"strict-priority+resume"`` -> the strict-priority policy, resuming."""
    base, resumes = name, None
    if name.endswith(RESUME):
        base, resumes = name.removesuffix(RESUME), True
    elif name.endswith(RESTART):
        base, resumes = name.removesuffix(RESTART), False
    spec = POLICIES.get(base)
    if spec is None:
        raise ValueError(
            f"policy: unknown {name!r}; known: {', '.join(POLICIES)}, each optionally "
            f"with {RESUME} or {RESTART}"
        )
    return Column(name, spec, spec.resumes if resumes is None else resumes)


def make_policy(
    name: str,
    classes: Mapping[str, TaskClass] | None = None,
    config: SchedulerConfig | None = None,
) -> Policy:
    """A fresh policy by name (``POLICIES``, or a column name), default classes if None."""
    spec = column(name).policy
    return spec.factory(
        classes if classes is not None else default_classes(), config or SchedulerConfig()
    )


def parse_policy_names(text: str) -> list[str]:
    """``"tierlm,fifo+resume"`` -> ``["tierlm", "fifo+resume"]``, checked, duplicates dropped."""
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        column(name)  # raises on an unknown name
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"policies: give at least one of {', '.join(DEFAULT_COLUMNS)}")
    return names
