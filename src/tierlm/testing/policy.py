"""Driving a policy by hand, without the shell (sans-I/O tests of ``tierlm.core``)."""

from __future__ import annotations

from tierlm.core.jobs import Job
from tierlm.core.policy import Device, Policy

__all__ = ["next_start"]


def next_start(policy: Policy, now: float, loaded_model: str | None) -> Job | None:
    """The job ``policy`` starts on a free one-slot device holding
    ``loaded_model`` (out of its queue and running from ``now``), or None."""
    decision = policy.decide(now, Device(loaded_model))
    return decision.start[0] if decision.start else None
