"""The policy interface: what the asyncio shell asks of a scheduling policy.

Every policy, ours (`TieredPolicy`) and the baselines the simulator compares it
with, implements this, so every comparison runs through the same shell
(docs/design.md §1). A policy is sans-I/O: time is an argument, it never reads a clock,
never awaits, never touches a runner. The shell tells it what happened and asks
it what to do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from tierlm.core.classes import TaskClass
from tierlm.core.device import Decision, Device
from tierlm.core.jobs import Foreground, Job

__all__ = ["Decision", "Device", "Policy"]


class Policy(Protocol):
    """A scheduling policy for one device that holds one model at a time."""

    @property
    def name(self) -> str:
        """Short name for tables and charts ("tierlm", "fifo", ...)."""

    @property
    def classes(self) -> Mapping[str, TaskClass]:
        """The task classes the policy knows."""

    @property
    def foreground(self) -> Foreground | None:
        """The surface the person looks at, as last set (``set_foreground``)."""

    def submit(self, job: Job, now: float) -> None:
        """A new job enters the queue."""

    def remove(self, job: Job, now: float) -> None:
        """A queued job leaves the queue without running (its caller cancelled)."""

    def requeue(self, job: Job, now: float) -> None:
        """A preempted job goes back to the queue (after ``finished``)."""

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        """The surface the person looks at changed (None: no AI surface open)."""

    def decide(self, now: float, device: Device) -> Decision:
        """This step's plan (docs/design.md §2.2): which queued jobs start
        (taken out of the queue, counted as running from ``now``), which running
        jobs stop and how, and when to ask again with no event. The shell asks
        at every event and applies the answer; nothing else passes between
        them. One slot: start the best job when the device is free, else
        whether the running one should stop (docs/design.md §4.7)."""

    def finished(self, job: Job, now: float) -> None:
        """``job`` stopped running: completed, failed, cancelled or preempted."""

    def swapped(self, model_id: str, seconds: float, now: float) -> None:
        """The runner finished loading ``model_id``; the swap took ``seconds``
        (the tiered policy caps its chat holds by it: docs/design.md §4.8)."""

    def tier(self, job: Job, now: float) -> int:
        """The job's effective tier now (for snapshots and metrics)."""

    def queued(self) -> Iterator[Job]:
        """Every queued job, in no particular order."""

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """Every queued job, in the order the policy would dispatch them if the
        device freed now and nothing else changed: the same order ``decide``
        would start them, call after call, with the device holding each picked job's
        model in turn (tiers, each tier's order, affinity and swaps). Timers are
        ignored (a chat grace, a deadline still ahead), and so is what running
        the jobs would change (vruntime charges, budget shares). A query: it
        changes nothing. For snapshots and queue positions (docs/design.md §2)."""

    def __len__(self) -> int:
        """How many jobs are queued."""

    def vruntimes(self, now: float) -> dict[str, float]:
        """Per-producer virtual runtime, where the policy keeps one."""

    def budget_shares(self, now: float) -> dict[str, float]:
        """Per budgeted class, its share of busy time in its window."""
